"""Adversarial agents earn nothing from the environment rubric (issue 32, Environments): padded,
guessed and recased ids, ids learned from an error the agent provoked or a user who repeats the
agent, guessed ref arguments and created records, content-free sign-offs; the generator never names
one record while the rubric expects another that nothing reveals; verify replays every task with
an agent that may only use revealed ids; seed data keeps ``require:`` rules; a ref cycle is a spec
error that names it."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
from test_env_cross_rules import _tables
from test_env_runtime import ava_task, db_field, handmade

from longcat_plugins.environments.contract import SpecError
from longcat_plugins.environments.domain import BaseDB, DBView, rule_violations
from longcat_plugins.environments.generate import EnvironmentGenerator, GenConfig, GenerationError
from longcat_plugins.environments.hacks import guess_credited
from longcat_plugins.environments.rubric import evaluate
from longcat_plugins.environments.runtime import Task, ToolEnvironment
from longcat_plugins.environments.spec import load_spec, parse_spec
from longcat_plugins.environments.user_sim import Fact, ScriptedUser
from longcat_plugins.environments.verify import SIGNOFFS, revealed_only_replay, signoff_met, verify_environment

CLINIC = Path(__file__).resolve().parents[1] / "examples" / "env_clinic" / "clinic.yaml"
CANCEL = ("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"})
LOOKUPS = [
    ("find_customer_by_email", {"email": "ava@example.com"}),
    ("list_customer_orders", {"customer_id": "CUS-0001"}),
]


def _run(ep: Any, calls: list[tuple[str, dict[str, Any]]]) -> list[bool]:
    return [ep.call_tool(n, a).ok for n, a in calls]


def _db_met(out: Any) -> list[str]:
    return [k for k, ok in out.details.items() if ok and k.split(":")[1].startswith("db_")]


@pytest.mark.parametrize("order_id", [" ORD-0002", "ORD-0002 ", "\tORD-0002\n", "ORD-0002"])
def test_a_padded_or_bare_guessed_id_earns_nothing(order_id: str) -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0)
    assert _run(ep, [("cancel_order", {"order_id": order_id, "cancel_reason": "found_cheaper"})]) == [True]
    assert ep.view.get("order", "ORD-0002")["status"] == "cancelled"  # the tool strips blanks: the write happened
    assert _db_met(ep.evaluate("The total was 57.50.")) == []
    # the honest chain, padded the same way after the lookups revealed the id, is credited
    ok = env.new_episode("cancel", seed=0)
    _run(ok, LOOKUPS + [("cancel_order", {"order_id": order_id, "cancel_reason": "found_cheaper"})])
    assert len(_db_met(ok.evaluate(""))) == 2


def test_an_id_echoed_by_an_error_the_agent_provoked_is_not_revealed() -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0)
    result = ep.call_tool("find_customer_by_email", {"email": "ORD-0002"})
    assert not result.ok and "ORD-0002" in result.content  # the error echoes the agent's own guess
    ep.call_tool("ORD-0002", {})  # and an unknown tool named like the id
    ep.call_tool("get_order_details", {"ORD-0002": 1})  # and an argument named like it
    _run(ep, [CANCEL])
    assert not ep.is_revealed("ORD-0002")
    assert _db_met(ep.evaluate("")) == []


def test_a_guess_laundered_through_a_record_stays_a_guess() -> None:
    """Typing the guess into a field and reading it back presents it as data, but a value the agent
    typed before anything revealed it stays a guess."""
    env = handmade()
    ep = env.new_episode("cancel", seed=0)
    launder = [
        LOOKUPS[0],
        ("update_customer_phone", {"customer_id": "CUS-0001", "phone": "ORD-0002"}),
        ("get_customer_profile", {"customer_id": "CUS-0001"}),
    ]
    assert _run(ep, launder + [CANCEL]) == [True] * 4
    assert ep.is_revealed("ORD-0002") and "ORD-0002" in ep.guessed
    assert _db_met(ep.evaluate("")) == []


def test_a_successful_lookup_on_a_guessed_id_reveals_nothing() -> None:
    """A guessed order's details name its customer; acting on that customer is the guess's luck."""
    env = handmade()
    task = ava_task(
        "news",
        ["Subscribe me to the newsletter."],
        [db_field("customer", "CUS-0001", "newsletter", True)],
        [("set_newsletter_subscription", {"customer_id": "CUS-0001", "newsletter": True})],
    )
    env = ToolEnvironment(env.spec, env.base.tables, env.tool_names, [task])
    ep = env.new_episode("news", seed=0)
    assert _run(ep, [("get_order_details", {"order_id": "ORD-0002"})]) == [True]  # shows customer_id CUS-0001
    assert _run(ep, [("set_newsletter_subscription", {"customer_id": "CUS-0001", "newsletter": True})]) == [True]
    assert ep.evaluate("").score == 0.0
    honest = env.new_episode("news", seed=0)
    _run(honest, honest.golden_chain())
    assert honest.evaluate("").success


class _EchoUser(ScriptedUser):
    """A user who repeats what the agent said (as a model-played user may)."""

    def reply(self, assistant_text: str) -> str | None:
        return f"Yes, {assistant_text}"


def test_a_user_who_repeats_the_agent_reveals_nothing_but_a_user_who_knows_does() -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0, user=lambda script, noise, seed: _EchoUser(script, noise, seed))
    ep.user_reply("Is it ORD-0002?")
    assert not ep.is_revealed("ORD-0002")
    _run(ep, [CANCEL])
    assert _db_met(ep.evaluate("")) == []
    knows = copy.deepcopy(env.tasks[0])
    knows.facts.append(Fact("id", "My order number is ORD-0002.", ("number",)))
    env2 = ToolEnvironment(env.spec, env.base.tables, env.tool_names, [knows])
    ep2 = env2.new_episode("cancel", seed=0, user=lambda script, noise, seed: _EchoUser(script, noise, seed))
    assert ep2.is_revealed(" ord-0002 ")  # stated by the user: compared canonically
    _run(ep2, [CANCEL])
    assert len(_db_met(ep2.evaluate(""))) == 2


def _clinic_env(tasks: list[Task]) -> ToolEnvironment:
    spec = load_spec(CLINIC)
    tables = _tables(needs_pa=False, auth="approved")
    tables["appointment"] = {
        "APT-0001": {
            "patient_id": "PAT-0002",
            "appointment_code": "C1",
            "day": "2025-02-01",
            "slot": "09:00",
            "reason": "checkup",
            "status": "completed",
        }
    }
    return ToolEnvironment(spec, tables, list(spec.tools), tasks)


def test_guessed_ref_arguments_and_created_records_earn_nothing() -> None:
    send = Task(
        task_id="send",
        persona="You are Ava Lopez.",
        facts=[Fact("rx", "My prescription number is R1.", ("number",))],
        goals=["Send it to the Nova Plaza pharmacy."],
        rubric=[
            db_field("prescription", "RX-0001", "status", "sent"),
            db_field("prescription", "RX-0001", "pharmacy_id", "PHA-0002"),
            {"kind": "no_collateral"},
        ],
        golden=[
            ("find_prescription_by_number", {"rx_number": "R1"}),
            ("find_pharmacy_by_name", {"name": "Nova Plaza"}),
            ("send_to_pharmacy", {"rx_id": "RX-0001", "pharmacy_id": "PHA-0002"}),
        ],
    )
    book = Task(
        task_id="book",
        persona="You are Ava Lopez.",
        facts=[Fact("who", "My name is Ava Lopez, born 1991-07-09.", ("name",))],
        goals=["Book me on 2025-03-01 at 10:00 for a checkup."],
        rubric=[
            {
                "kind": "db_created",
                "entity": "appointment",
                "fields": {"patient_id": "PAT-0002", "day": "2025-03-01", "slot": "10:00", "reason": "checkup"},
            },
            {"kind": "no_collateral"},
        ],
        golden=[
            ("find_patient", {"name": "Ava Lopez", "birth_date": "1991-07-09"}),
            ("book_appointment", {"patient_id": "PAT-0002", "day": "2025-03-01", "slot": "10:00", "reason": "checkup"}),
        ],
    )
    env = _clinic_env([send, book])
    # the prescription was looked up, the pharmacy guessed: neither the link nor the send is credited
    ep = env.new_episode("send", seed=0)
    assert _run(ep, [send.golden[0], (send.golden[2][0], {"rx_id": "RX-0001", "pharmacy_id": " PHA-0002"})]) == [
        True,
        True,
    ]
    assert ep.evaluate("").score == 0.0
    # a booking for a guessed patient
    ep = env.new_episode("book", seed=0)
    assert _run(ep, [book.golden[1]]) == [True]
    assert ep.evaluate("").score == 0.0
    for task in (send, book):
        honest = env.new_episode(task.task_id, seed=0)
        _run(honest, honest.golden_chain())
        assert honest.evaluate("").success, task.task_id
        assert guess_credited(env, task) == {}


def _status_task(rubric_name: str) -> Task:
    return Task(
        task_id="status",
        persona="You are Ava Lopez.",
        facts=[Fact("code", "My appointment code is C1.", ("code",))],
        goals=["Please tell me the status of the appointment."],
        rubric=[{"kind": "output", "name": rubric_name, "value": "completed"}, {"kind": "no_collateral"}],
        golden=[
            ("find_appointment_by_code", {"appointment_code": "C1"}),
            ("get_appointment", {"appointment_id": "APT-0001"}),
        ],
    )


def test_a_content_free_sign_off_meets_no_output() -> None:
    env = _clinic_env([_status_task("get_appointment.status")])
    assert env.new_episode("status", seed=0).evaluate("I have completed your request.").score == 0.0
    ep = env.new_episode("status", seed=0)
    assert all(_run(ep, ep.golden_chain()))
    for answer in SIGNOFFS:
        assert ep.evaluate(answer).score == 0.0, answer
    assert ep.evaluate(ep.golden_answer()).success  # "status: completed"
    assert ep.evaluate("The appointment is completed.").success
    assert ep.evaluate("It was completed on 2025-02-01, as the record shows.").score == 0.0  # no context
    assert signoff_met(env, env.tasks[0]) == []
    # a generic word of the entity's name is no context: "your request" is every sign-off's
    spec = load_spec("food_delivery")
    item = {"kind": "output", "name": "get_refund_request.status", "value": "approved"}
    empty = DBView(BaseDB(spec, {}))
    assert not evaluate(empty, [item], "Your request has been processed and approved.").success
    assert evaluate(empty, [item], "Your refund request was approved.").success
    assert evaluate(empty, [item], "Its status: approved.").success


def test_verify_rejects_a_task_a_sign_off_meets_and_one_that_needs_an_unrevealed_id() -> None:
    # an output without a field name has no context to ask for: a sign-off meets it, so verify rejects it
    env = _clinic_env([_status_task("")])
    v = verify_environment(env, min_tools=0)
    assert not v.ok and v.reasons.get("signoff_meets_output"), v.messages
    # a golden chain that acts on an id nothing revealed (no listing of the orders)
    env = handmade()
    task = copy.deepcopy(env.tasks[0])
    task.golden = [task.golden[0], task.golden[2], task.golden[3]]
    env = ToolEnvironment(env.spec, env.base.tables, env.tool_names, [task])
    unrevealed, solved = revealed_only_replay(env, task)
    assert unrevealed == ["cancel_order.order_id=ORD-0002", "get_order_details.order_id=ORD-0002"] and not solved
    v = verify_environment(env, min_tools=0)
    assert v.reasons.get("golden_uses_unrevealed_id") == 1, v.messages
    assert verify_environment(handmade(), min_tools=0).ok


@pytest.mark.parametrize("domain", ["retail", "travel", "food_delivery", str(CLINIC)])
def test_generated_tasks_are_solvable_from_revealed_ids_and_no_guess_is_credited(domain: str) -> None:
    """The clinic's env 35 (seed 0) named the prescription's pharmacy in its text while the rubric
    expected another pharmacy no tool revealed; every task must now be solvable from revealed ids,
    and the id-guessing agents must earn nothing."""
    gen = EnvironmentGenerator(load_spec(domain), seed=0, config=GenConfig())
    n = 36 if domain == str(CLINIC) else 8
    tasks = 0
    for i in range(n):
        try:
            env = gen.generate(i)
        except GenerationError:
            continue
        for task in env.tasks:
            tasks += 1
            unrevealed, solved = revealed_only_replay(env, task)
            assert not unrevealed and solved, (task.task_id, unrevealed)
            if i < 8:
                assert guess_credited(env, task) == {}, task.task_id
                assert signoff_met(env, task) == [], task.task_id
        assert rule_violations(env.spec, env.base.tables) == []
    assert tasks >= 2 * min(n, 8)


def test_rules_keep_require_on_ref_arguments_and_one_of_several_transitions() -> None:
    spec = load_spec(CLINIC)
    [rule] = spec.rules()
    assert rule.when == {"pharmacy_id.status": ("open",)}  # send_to_pharmacy's require:
    # sign_with_prior_auth also leads to "signed", but so does sign_prescription, with no condition
    assert all(r.to != "signed" for r in spec.rules())


def _cyclic(fields_b: dict[str, Any]) -> dict[str, Any]:
    return {
        "domain": "d",
        "entities": {
            "a": {"key": "a_id", "prefix": "A", "label": "name", "fields": {"name": {"type": "name", "unique": True}}},
            "b": {
                "key": "b_id",
                "prefix": "B",
                "label": "name",
                "fields": {"name": {"type": "name", "unique": True}, **fields_b},
            },
        },
        "tools": [{"name": "find_a", "op": "find", "entity": "a", "by": "name"}],
    }


def test_a_ref_cycle_is_a_spec_error_naming_it() -> None:
    raw = _cyclic({"a_id": {"type": "ref", "entity": "a"}})
    raw["entities"]["a"]["fields"]["b_id"] = {"type": "ref", "entity": "b"}
    with pytest.raises(SpecError, match=r"entities\.a\.fields\.b_id: ref cycle a\.b_id -> b\.a_id -> a"):
        parse_spec(raw, source="cyclic.yaml")
    with pytest.raises(SpecError, match=r"ref cycle b\.boss -> b"):
        parse_spec(_cyclic({"boss": {"type": "ref", "entity": "b"}}))
    parse_spec(_cyclic({"a_id": {"type": "ref", "entity": "a"}}))  # a chain without a cycle is fine
