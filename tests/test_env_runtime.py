"""The environment runtime (E1): rubric evaluation accepts any valid tool chain and rejects wrong
ones, episodes are isolated, bad model input never raises, generated environments verify, and
folders round-trip through disk."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path
from typing import Any

import pytest

from longcat_plugins.environments.contract import EnvironmentLoadError, Episode
from longcat_plugins.environments.generate import EnvironmentGenerator
from longcat_plugins.environments.noise import NoiseConfig
from longcat_plugins.environments.rubric import mentions, string_values
from longcat_plugins.environments.runtime import Task, ToolEnvironment, load_environment
from longcat_plugins.environments.spec import load_spec
from longcat_plugins.environments.user_sim import Fact, ModelUserSimulator, UserScript, UserSimulatorUnavailable
from longcat_plugins.environments.verify import verify_environment

DOMAINS = ("retail", "travel", "food_delivery")


def _order(customer: str, status: str, placed_on: str, total: float) -> dict[str, Any]:
    return {
        "customer_id": customer,
        "status": status,
        "placed_on": placed_on,
        "total": total,
        "shipping_method": "standard",
        "cancel_reason": "none",
        "gift_note": "",
    }


def handmade() -> ToolEnvironment:
    """Two orders of one customer; the task: cancel the April one (reason found_cheaper), say its total."""
    spec = load_spec("retail")
    return ToolEnvironment(spec, handmade_db(), list(spec.tools), [cancel_task()])


def handmade_db() -> dict[str, Any]:
    cust = {"tier": "basic", "city": "Lisbon", "loyalty_points": 10, "newsletter": False}
    db = {
        "customer": {
            "CUS-0001": {"name": "Ava Lopez", "email": "ava@example.com", "phone": "555-100-2000", **cust},
            "CUS-0002": {"name": "Omar Kim", "email": "omar@example.com", "phone": "555-100-3000", **cust},
        },
        "order": {
            "ORD-0001": _order("CUS-0001", "pending", "2025-03-01", 20.0),
            "ORD-0002": _order("CUS-0001", "processing", "2025-04-01", 57.5),
            "ORD-0003": _order("CUS-0002", "pending", "2025-04-01", 11.0),
        },
    }
    return db


def db_field(entity: str, key: str, field: str, value: Any) -> dict[str, Any]:
    """A rubric item: the record ``key`` of ``entity`` must end with ``field`` equal to ``value``."""
    return {"kind": "db_field", "entity": entity, "key": key, "field": field, "value": value}


def ava_task(
    task_id: str,
    goals: list[str],
    rubric: list[dict[str, Any]],
    golden: list[tuple[str, dict[str, Any]]],
    more_facts: tuple[Fact, ...] = (),
) -> Task:
    """A task of the handmade store's Ava Lopez, who gives her email: the golden chain starts by
    finding her by it, and the rubric ends with ``no_collateral`` (nothing else in the store changes)."""
    return Task(
        task_id=task_id,
        persona="You are Ava Lopez.",
        facts=[Fact("email", "My email is ava@example.com.", ("email",)), *more_facts],
        goals=goals,
        rubric=[*rubric, {"kind": "no_collateral"}],
        golden=[("find_customer_by_email", {"email": "ava@example.com"}), *golden],
    )


def cancel_task() -> Task:
    return ava_task(
        "cancel",
        ["Please cancel it, I found it cheaper elsewhere.", "What was its total?"],
        [
            db_field("order", "ORD-0002", "status", "cancelled"),
            db_field("order", "ORD-0002", "cancel_reason", "found_cheaper"),
            {"kind": "output", "value": 57.5, "renderings": ["57.50", "57.5"]},
        ],
        [
            ("list_customer_orders", {"customer_id": "CUS-0001"}),
            ("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"}),
            ("get_order_details", {"order_id": "ORD-0002"}),
        ],
        more_facts=(
            Fact("order", "It is the order placed on 2025-04-01.", ("date", "which"), True, "It is one of my orders."),
        ),
    )


def run(ep: Episode, chain: list[tuple[str, dict[str, Any]]]) -> list[bool]:
    return [ep.call_tool(n, a).ok for n, a in chain]


def test_any_valid_chain_passes_and_wrong_ones_fail() -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0)
    assert all(run(ep, ep.golden_chain()))
    assert ep.evaluate("Cancelled; the total was $57.50.").success
    # another valid chain: phone lookup, read first, then cancel
    ep = env.new_episode("cancel", seed=0)
    alt = [
        ("find_customer_by_phone", {"phone": "555-100-2000"}),
        ("list_customer_orders", {"customer_id": "CUS-0001"}),
        ("get_order_status", {"order_id": "ORD-0002"}),
        ("get_order_details", {"order_id": "ORD-0002"}),
        ("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"}),
    ]
    assert all(run(ep, alt))
    out = ep.evaluate("Done, total 57.5")
    assert out.success and out.score == 1.0
    # wrong record: the March order
    ep = env.new_episode("cancel", seed=0)
    run(ep, [("cancel_order", {"order_id": "ORD-0001", "cancel_reason": "found_cheaper"})])
    out = ep.evaluate("total 57.50")
    assert not out.success and out.details["3:no_collateral"] is False
    assert out.notes["stray_changes"] == ["changed order ORD-0001.cancel_reason", "changed order ORD-0001.status"]
    assert all(isinstance(v, bool) for v in out.details.values())
    # wrong argument, and a right chain plus a stray write
    ep = env.new_episode("cancel", seed=0)
    wrong = [("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "no_longer_needed"})]
    run(ep, ep.golden_chain()[:2] + wrong + ep.golden_chain()[3:])
    assert ep.evaluate("57.50").score == pytest.approx(3 / 4)
    # the same without reading the total: stating it is a guess, not an answer
    ep = env.new_episode("cancel", seed=0)
    run(ep, ep.golden_chain()[:2] + wrong)
    assert ep.evaluate("57.50").score == pytest.approx(2 / 4)
    ep = env.new_episode("cancel", seed=0)
    run(ep, ep.golden_chain() + [("set_newsletter_subscription", {"customer_id": "CUS-0001", "newsletter": True})])
    assert not ep.evaluate("57.50").success
    # the output must be stated as a number, not as part of another one
    ep = env.new_episode("cancel", seed=0)
    run(ep, ep.golden_chain())
    assert not ep.evaluate("total 157.50").success
    assert ep.evaluate("").score == pytest.approx(3 / 4)


def test_preconditions_refuse_and_leave_state() -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0)
    assert ep.call_tool("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"}).ok
    again = ep.call_tool("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"})
    assert not again.ok and "precondition failed" in again.content and "cancelled" in again.content
    r = ep.call_tool("create_return_request", {"order_id": "ORD-0001", "reason": "damaged", "opened_on": "2025-05-01"})
    assert not r.ok and "delivered" in json.loads(r.content)["error"]
    assert ep.view.changes().keys() == {"order"}


@pytest.mark.parametrize(
    ("name", "args", "needle"),
    [
        ("no_such_tool", {}, "unknown tool"),
        ("cancel_order", [1, 2], "JSON object"),
        ("cancel_order", "{not json", "not valid JSON"),
        ("cancel_order", {"order_id": "ORD-0002"}, "missing required argument 'cancel_reason'"),
        ("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "bored"}, "must be one of"),
        ("cancel_order", {"order_id": "ORD-9", "cancel_reason": "found_cheaper"}, "no order with order_id"),
        ("change_item_quantity", {"item_id": "ITM-1", "quantity": "lots"}, "must be an integer"),
        ("get_order_details", {"order_id": "ORD-0001", "verbose": True}, "unexpected argument"),
        ("update_shipment_eta", {"shipment_id": "SHP-1", "eta": "next tuesday"}, "must be a date"),
        ("list_customer_orders", {"customer_id": "CUS-0001", "page": 0}, "page must be >= 1"),
    ],
)
def test_bad_model_input_is_an_error_result_never_an_exception(name: str, args: Any, needle: str) -> None:
    ep = handmade().new_episode("cancel", seed=0)
    r = ep.call_tool(name, args)
    assert not r.ok and needle in r.content
    assert ep.tool_errors == 1 and not ep.view.changes()


def test_episodes_are_isolated() -> None:
    env = handmade()
    eps = [env.new_episode("cancel", seed=i) for i in range(500)]
    for i, ep in enumerate(eps):  # interleave: every other episode solves, the rest cancel the wrong order
        if i % 2 == 0:
            run(ep, ep.golden_chain())
        else:
            run(ep, [("cancel_order", {"order_id": "ORD-0001", "cancel_reason": "ordered_by_mistake"})])
    for i, ep in enumerate(eps):
        assert ep.evaluate("57.5").success == (i % 2 == 0)
        s1 = json.loads(ep.call_tool("get_order_status", {"order_id": "ORD-0001"}).content)["status"]
        assert s1 == ("pending" if i % 2 == 0 else "cancelled")
    assert env.base.tables["order"]["ORD-0002"]["status"] == "processing"
    fresh = env.new_episode("cancel", seed=0)
    assert json.loads(fresh.call_tool("get_order_status", {"order_id": "ORD-0002"}).content)["status"] == "processing"


def test_creates_are_private_to_an_episode() -> None:
    env = handmade()
    a, b = env.new_episode("cancel", seed=0), env.new_episode("cancel", seed=0)
    args = {"customer_id": "CUS-0001", "subject": "late", "priority": "high"}
    ka = json.loads(a.call_tool("open_support_ticket", args).content)["ticket_id"]
    kb = json.loads(b.call_tool("open_support_ticket", args).content)["ticket_id"]
    assert ka == kb  # same id, different worlds
    assert a.call_tool("delete_address", {"address_id": "ADR-0001"}).ok is False
    assert len(json.loads(a.call_tool("list_customer_tickets", {"customer_id": "CUS-0001"}).content)["items"]) == 1
    c = env.new_episode("cancel", seed=0)
    assert json.loads(c.call_tool("list_customer_tickets", {"customer_id": "CUS-0001"}).content)["items"] == []


@pytest.mark.parametrize("domain", DOMAINS)
def test_generated_golden_chains_pass_and_broken_ones_fail(domain: str) -> None:
    gen = EnvironmentGenerator(load_spec(domain), seed=5)
    checked = 0
    for i in range(15):
        env = gen.generate(i)
        assert verify_environment(env).ok
        for task in env.tasks:
            ep = env.new_episode(task.task_id, seed=1)
            assert isinstance(ep, Episode)
            assert all(run(ep, ep.golden_chain()))
            assert ep.evaluate(ep.golden_answer()).success
            writes = [j for j, (n, _) in enumerate(task.golden) if env.spec.tools[n].is_write]
            if writes:  # drop a state-changing step
                ep = env.new_episode(task.task_id, seed=1)
                run(ep, [c for j, c in enumerate(task.golden) if j != writes[0]])
                assert not ep.evaluate(ep.golden_answer()).success
            # extra reads never hurt: any valid chain passes
            ep = env.new_episode(task.task_id, seed=1)
            for name, args in task.golden:
                ep.call_tool(name, args)
                if not env.spec.tools[name].is_write:
                    ep.call_tool(name, args)
            assert ep.evaluate(ep.golden_answer()).success
            checked += 1
    assert checked >= 30


def test_verification_rejects_a_broken_environment() -> None:
    env = EnvironmentGenerator(load_spec("retail"), seed=2).generate(0)
    assert verify_environment(env).ok
    task = env.tasks[0]
    item = next(i for i in task.rubric if i["kind"] in ("db_field", "output"))
    item["value"] = "something else"
    item.pop("renderings", None)
    verdict = verify_environment(env)
    assert not verdict.ok and verdict.reasons.get("golden_rubric_failed") == 1
    # a record the golden chain needs disappears: its call fails
    env = EnvironmentGenerator(load_spec("retail"), seed=2).generate(0)
    name, args = env.tasks[0].golden[-1]
    ent = env.spec.tools[name].entity
    key = args.get(env.spec.entities[ent].key)
    if key in env.base.tables[ent]:
        del env.base.tables[ent][key]
        assert "golden_call_failed" in verify_environment(env).reasons


def test_save_load_round_trip(tmp_path: Path) -> None:
    env = EnvironmentGenerator(load_spec("travel"), seed=4).generate(3)
    env.save(tmp_path / "e")
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == sorted(
        ["domain.json", "db.json", "tools.json", "policy.md", "tasks.json", "env.json"]
    )
    loaded = load_environment(tmp_path / "e")
    assert loaded is load_environment(str(tmp_path / "e"))  # cached per folder
    EnvironmentGenerator(load_spec("travel"), seed=4).generate(4).save(tmp_path / "f")
    assert load_environment(tmp_path / "f").toolkit is loaded.toolkit  # one toolkit per domain
    assert [t.task_id for t in loaded.tasks] == [t.task_id for t in env.tasks]
    tau2 = json.loads((tmp_path / "e" / "tasks.json").read_text())[0]  # tau2-bench's task fields too
    assert tau2["id"] == env.tasks[0].task_id and tau2["user_scenario"]["instructions"]["domain"] == "travel"
    assert [a["name"] for a in tau2["evaluation_criteria"]["actions"]] == [n for n, _ in env.tasks[0].golden]
    assert loaded.tool_schemas() == json.loads((tmp_path / "e" / "tools.json").read_text())
    assert {s["function"]["name"] for s in loaded.tool_schemas()} == set(env.tool_names)
    ep = loaded.new_episode(loaded.tasks[0].task_id, seed=0, noise=NoiseConfig.at_level(0))
    assert ep.system_prompt().startswith("You are a travel-agency agent")
    assert all(run(ep, ep.golden_chain())) and ep.evaluate(ep.golden_answer()).success
    with pytest.raises(KeyError, match="no task 'nope'"):
        loaded.new_episode("nope", seed=0)
    (tmp_path / "e" / "db.json").unlink()
    with pytest.raises(EnvironmentLoadError, match=r"missing \['db.json'\]"):
        load_environment(tmp_path / "e")
    with pytest.raises(EnvironmentLoadError, match="not an environment folder"):
        load_environment(tmp_path / "nothing")


def test_scripted_user_reveals_withheld_facts_and_ends() -> None:
    env = handmade()
    ep = env.new_episode("cancel", seed=0, noise=NoiseConfig(level=9, withhold=1, ambiguous=True))
    first = ep.first_user_message()
    assert "2025-04-01" not in first and "one of my orders" in first
    assert ep.user_reply("Which order do you mean? What date was it placed?") == "It is the order placed on 2025-04-01."
    assert "ava@example.com" in (ep.user_reply("Could you give me your email?") or "")
    assert ep.user_reply("I have cancelled it; the total was 57.50.") is None
    clean = env.new_episode("cancel", seed=0)
    assert clean.first_user_message() == " ".join(
        ["My email is ava@example.com.", "It is the order placed on 2025-04-01."] + env.tasks[0].goals
    )


class _Chat(BaseHTTPRequestHandler):
    seen: list[dict[str, Any]] = []

    def do_POST(self) -> None:  # noqa: N802 - http.server's name
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _Chat.seen.append(body)
        text = "###STOP###" if len(_Chat.seen) > 1 else "My email is ava@example.com."
        data = json.dumps({"choices": [{"message": {"role": "assistant", "content": text}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: Any) -> None:
        pass


def test_model_user_simulator_over_openai_endpoint() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Chat)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/v1"
        env = handmade()

        def factory(script: UserScript, noise: NoiseConfig, seed: int) -> ModelUserSimulator:
            return ModelUserSimulator(script, noise, base_url=url, model="user-sim", api_key="k")

        ep = env.new_episode("cancel", seed=0, user=factory)
        assert "Please cancel it" in ep.first_user_message()
        assert ep.user_reply("What is your email?") == "My email is ava@example.com."
        assert ep.user_reply("Done.") is None
        sent = _Chat.seen[0]
        assert sent["model"] == "user-sim" and sent["messages"][0]["role"] == "system"
        assert sent["messages"][-1] == {"role": "user", "content": "What is your email?"}
    finally:
        server.shutdown()
    dead = ModelUserSimulator(env.tasks[0].script(), NoiseConfig(), base_url="http://127.0.0.1:9/v1", model="m")
    with pytest.raises(UserSimulatorUnavailable, match=r"http://127.0.0.1:9/v1/chat/completions unreachable"):
        dead.reply("hello?")


def hedging_env() -> ToolEnvironment:
    """The handmade store with a read-only task: the April order's status and how many orders Ava has."""
    spec = load_spec("retail")
    task = ava_task(
        "ask",
        ["What is the status of my April order, and how many orders do I have?"],
        [
            {"kind": "output", "name": "get_order_status.status", "value": "processing"},
            {"kind": "output", "name": "count_customer_orders.count", "value": 2},
        ],
        [
            ("count_customer_orders", {"customer_id": "CUS-0001"}),
            ("list_customer_orders", {"customer_id": "CUS-0001"}),  # reveals ORD-0002
            ("get_order_status", {"order_id": "ORD-0002"}),
        ],
    )
    return ToolEnvironment(spec, handmade_db(), list(spec.tools), [task])


def test_a_write_to_an_id_the_episode_never_revealed_is_not_credited() -> None:
    """Generated targets may follow a pattern (a policy found that many end in -0003): an id used
    before any message or tool result showed it is a guess, and its record's items are not met."""
    env = handmade()
    guess = env.new_episode("cancel", seed=0)
    run(guess, [("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"})])
    out = guess.evaluate("The total was 57.50.")
    assert "ORD-0002" in guess.guessed
    assert out.details["0:db_field:order.ORD-0002.status"] is False
    assert out.details["1:db_field:order.ORD-0002.cancel_reason"] is False
    # looking it up afterwards does not make the earlier guess skill
    run(guess, env.new_episode("cancel", seed=0).golden_chain()[:2])
    run(guess, [("cancel_order", {"order_id": "ORD-0002", "cancel_reason": "found_cheaper"})])
    assert not guess.evaluate("The total was 57.50.").success
    # the same write after the lookups revealed the id is credited
    found = env.new_episode("cancel", seed=0)
    assert all(run(found, found.golden_chain()))
    assert not found.guessed - {"found_cheaper"} and found.evaluate("The total was 57.50.").success
    # an id stated by the user is no guess; a longer id containing it does not reveal it
    assert mentions("It is ORD-0002, thanks", "ORD-0002") and not mentions("ORD-00021", "ORD-0002")
    assert string_values({"a": "x", "b": [{"c": "y"}, 3], "d": " "}) == ["x", "y"]


def test_a_hedged_answer_states_nothing_and_doing_nothing_earns_nothing() -> None:
    env = hedging_env()
    ep = env.new_episode("ask", seed=0)
    assert all(run(ep, ep.golden_chain()))
    # a clear answer (ids, dates and the other output's value are no rivals)
    out = ep.evaluate("Order ORD-0002 of 2025-04-01 is processing; you have 2 orders.")
    assert out.success and out.score == 1.0
    # every status the enum allows, or a run of counts: the policy looked nothing up and hedged
    out = ep.evaluate("Done. pending processing shipped delivered cancelled 0 1 2 3")
    assert out.details == {
        "0:output:get_order_status.status": False,
        "1:output:count_customer_orders.count": False,
        "2:no_collateral": False,
    }
    assert out.score == 0.0
    # one hedge spoils only its own item
    out = ep.evaluate("It is processing or pending; you have 2 orders.")
    assert out.details["0:output:get_order_status.status"] is False
    assert out.details["1:output:count_customer_orders.count"] is True
    # a price (a decimal) is no rival of a count
    assert ep.evaluate("processing; 2 orders, the last one 57.50").success
    # the kind of answer a policy found on generated tasks: no tool call, a list of likely values
    fresh = env.new_episode("ask", seed=0)
    assert fresh.evaluate("Done. active discontinued 0 1 2 3 fedex ups dhl usps pending processing").score == 0.0
    # doing nothing changes nothing, and earns nothing
    assert env.new_episode("ask", seed=0).evaluate("Done.").score == 0.0
    # the handmade cancel task: no_collateral still counts once something else is met
    cancel = handmade().new_episode("cancel", seed=0)
    assert cancel.evaluate("Done.").score == 0.0
    # a value no tool result showed is a guess, however right: no call, no credit for stating it
    assert cancel.evaluate("The total was 57.50.").score == 0.0
    # read it (the lookups reveal the order, its details the total): the output and no_collateral are met
    run(cancel, [cancel.golden_chain()[i] for i in (0, 1, 3)])
    assert cancel.evaluate("The total was 57.50.").score == pytest.approx(2 / 4)
