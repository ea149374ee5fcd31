"""Cross-entity rules in domain specs (issue 13 item 7), proven on a held-out-style clinic domain
(examples/env_clinic/clinic.yaml): a precondition on related records with alternatives, a two-key
lookup, a ref-valued transition argument, seed data that keeps every declared rule, and the
generator's knobs on ``envgen`` so a 7-tool prior-authorisation chain is generated."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from click.testing import CliRunner

from longcat_plugins.cli import main
from longcat_plugins.environments.domain import BaseDB, DBView, Toolkit
from longcat_plugins.environments.generate import EnvironmentGenerator, GenConfig, GenerationError
from longcat_plugins.environments.runtime import load_environment
from longcat_plugins.environments.spec import load_spec
from longcat_plugins.environments.verify import check_tools, verify_environment

CLINIC = Path(__file__).resolve().parents[1] / "examples" / "env_clinic" / "clinic.yaml"
PA_TOOLS = ("request_prior_auth", "approve_prior_auth", "sign_with_prior_auth")


def _tables(*, needs_pa: bool, auth: str, pharmacy: str = "open") -> dict[str, dict[str, dict[str, Any]]]:
    return {
        "patient": {
            "PAT-0001": {
                "name": "Ava Lopez",
                "birth_date": "1980-02-03",
                "mrn": "M1",
                "phone": "555-1",
                "insurer": "none",
            },
            "PAT-0002": {
                "name": "Ava Lopez",
                "birth_date": "1991-07-09",
                "mrn": "M2",
                "phone": "555-2",
                "insurer": "none",
            },
        },
        "drug": {"DRG-0001": {"name": "Cobalt Lamp", "drug_class": "biologic", "requires_prior_auth": needs_pa}},
        "pharmacy": {
            "PHA-0001": {"name": "Harbor Inn", "city": "Oslo", "status": "open"},
            "PHA-0002": {"name": "Nova Plaza", "city": "Oslo", "status": pharmacy},
        },
        "prior_authorization": {
            "AUT-0001": {
                "patient_id": "PAT-0002",
                "drug_id": "DRG-0001",
                "auth_number": "A1",
                "submitted_on": "2025-01-02",
                "status": auth,
            }
        },
        "prescription": {
            "RX-0001": {
                "patient_id": "PAT-0002",
                "drug_id": "DRG-0001",
                "prior_auth_id": "AUT-0001",
                "pharmacy_id": "PHA-0001",
                "rx_number": "R1",
                "refills": 1,
                "written_on": "2025-01-01",
                "status": "signed",
            }
        },
        "appointment": {},
        "lab_order": {},
    }


def _send(tables: dict[str, Any], pharmacy: str = "PHA-0002") -> tuple[bool, Any, DBView]:
    spec = load_spec(CLINIC)
    view = DBView(BaseDB(spec, tables))
    ok, out = Toolkit(spec).call(view, "send_to_pharmacy", {"rx_id": "RX-0001", "pharmacy_id": pharmacy})
    return ok, out, view


def test_the_clinic_spec_declares_every_cross_entity_feature() -> None:
    spec = load_spec(CLINIC)
    find = spec.tools["find_patient"]
    assert find.lookup == ("name", "birth_date")
    assert find.openai_schema()["function"]["parameters"]["required"] == ["name", "birth_date"]
    send = spec.tools["send_to_pharmacy"]
    assert [(p.name, p.ref) for p in send.params] == [("rx_id", "prescription"), ("pharmacy_id", "pharmacy")]
    assert send.needs == {"prescription", "pharmacy"}
    assert "prescription.pharmacy_id" in send.writes
    [rule] = spec.rules()
    assert (rule.tool, rule.entity, rule.field, rule.to) == ("send_to_pharmacy", "prescription", "status", "sent")
    assert check_tools(spec) == {}


@pytest.mark.parametrize(
    ("needs_pa", "auth", "pharmacy", "ok", "error"),
    [
        (False, "pending", "open", True, ""),  # the drug needs no authorisation
        (True, "approved", "open", True, ""),  # the authorisation was approved
        (True, "pending", "open", False, "none of the alternatives holds"),
        (True, "denied", "open", False, "prior_auth_id.status is 'denied'"),
        (False, "approved", "closed", False, "pharmacy status is 'closed'"),  # require: on the ref argument
    ],
)
def test_send_to_pharmacy_enforces_the_rule_on_related_records(
    needs_pa: bool, auth: str, pharmacy: str, ok: bool, error: str
) -> None:
    done, out, view = _send(_tables(needs_pa=needs_pa, auth=auth, pharmacy=pharmacy))
    assert done is ok, out
    rx = view.get("prescription", "RX-0001")
    if ok:
        assert out == {"rx_id": "RX-0001", "status": "sent"}
        assert rx["pharmacy_id"] == "PHA-0002" and rx["status"] == "sent"
    else:
        assert error in out["error"], out
        assert rx["status"] == "signed" and rx["pharmacy_id"] == "PHA-0001"


def test_a_ref_argument_must_name_an_existing_record() -> None:
    done, out, _ = _send(_tables(needs_pa=False, auth="pending"), pharmacy="PHA-9999")
    assert not done and "no pharmacy with pharmacy_id 'PHA-9999'" in out["error"]


def test_two_key_lookup_needs_both_keys() -> None:
    spec = load_spec(CLINIC)
    view = DBView(BaseDB(spec, _tables(needs_pa=False, auth="pending")))
    kit = Toolkit(spec)
    assert kit.call(view, "find_patient", {"name": "Ava Lopez", "birth_date": "1991-07-09"}) == (
        True,
        {"patient_id": "PAT-0002", "mrn": "M2"},
    )
    assert kit.call(view, "find_patient", {"name": "Ava Lopez", "birth_date": "07/09/1991"})[1]["patient_id"] == (
        "PAT-0002"
    )
    ok, out = kit.call(view, "find_patient", {"name": "Ava Lopez", "birth_date": "1991-07-10"})
    assert not ok and "no patient with name 'Ava Lopez' and birth_date '1991-07-10'" in out["error"]
    ok, out = kit.call(view, "find_patient", {"name": "Ava Lopez"})
    assert not ok and "birth_date" in out["error"]


def _independent_violations(tables: dict[str, dict[str, dict[str, Any]]]) -> list[str]:
    """The clinic rules written out by hand: a sent prescription's drug needs no authorisation, or
    the authorisation it names was approved; and it went to an open pharmacy (send_to_pharmacy's
    ``require:`` on its ref argument)."""
    bad = []
    for k, rx in tables["prescription"].items():
        if rx["status"] != "sent":
            continue
        drug = tables["drug"][rx["drug_id"]]
        auth = tables["prior_authorization"][rx["prior_auth_id"]]
        if drug["requires_prior_auth"] is not False and auth["status"] != "approved":
            bad.append(k)
        if tables["pharmacy"][rx["pharmacy_id"]]["status"] != "open":
            bad.append(f"{k} at a closed pharmacy")
    return bad


@pytest.fixture(scope="module")
def clinic_envs() -> list[Any]:
    gen = EnvironmentGenerator(load_spec(CLINIC), seed=3, config=GenConfig(max_chain=10))
    envs = []
    for i in range(60):
        try:
            envs.append(gen.generate(i))
        except GenerationError:
            continue
    return envs


def test_seed_data_keeps_the_declared_rule_and_environments_verify(clinic_envs: list[Any]) -> None:
    assert len(clinic_envs) >= 55
    sent = 0
    verified = 0
    for env in clinic_envs:
        tables = env.base.tables
        assert _independent_violations(tables) == [], env.manifest["index"]
        sent += sum(rx["status"] == "sent" for rx in tables["prescription"].values())
        verified += verify_environment(env).ok
    assert sent >= 20  # the rule was exercised: prescriptions do start sent, each one lawfully
    assert verified >= 0.9 * len(clinic_envs)
    tools = {t for env in clinic_envs for task in env.tasks for t in task.chain}
    assert {"find_patient", "send_to_pharmacy", "sign_with_prior_auth", "request_prior_auth"} <= tools
    assert max(len(task.chain) for env in clinic_envs for task in env.tasks) > 6


def test_default_chain_cap_still_holds() -> None:
    gen = EnvironmentGenerator(load_spec(CLINIC), seed=3)
    lengths = []
    for i in range(15):
        try:
            lengths += [len(t.chain) for t in gen.generate(i).tasks]
        except GenerationError:
            continue
    assert lengths and max(lengths) <= GenConfig().max_chain == 6


def _prior_auth_chain(env: Any, task: Any) -> bool:
    """A chain of 7+ tools that sends a prescription whose drug needs prior authorisation (so only
    the approved authorisation lets it through), with a prior-authorisation step before the send."""
    chain = task.chain
    if len(chain) < 7 or "send_to_pharmacy" not in chain:
        return False
    if not any(t in chain[: chain.index("send_to_pharmacy")] for t in PA_TOOLS):
        return False
    ep = env.new_episode(task.task_id, seed=0)
    for name, args in task.golden:
        if name == "send_to_pharmacy":
            rx = ep.view.get("prescription", args["rx_id"])
            return ep.view.get("drug", rx["drug_id"])["requires_prior_auth"] is True
        assert ep.call_tool(name, args).ok
    return False


def test_envgen_exposes_genconfig_and_generates_a_seven_tool_prior_auth_chain(tmp_path: Path) -> None:
    out = tmp_path / "clinic"
    args = ["envgen", str(CLINIC), "-n", "18", "-o", str(out), "--seed", "6", "--max-chain", "12"]
    result = CliRunner().invoke(main, args, env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    stats = json.loads((out / "stats.json").read_text())
    assert stats["config"]["max_chain"] == 12 and stats["environments"] == 18
    df = pd.read_parquet(out / "tasks.parquet")
    found = []
    for row in df.itertuples():
        env = load_environment(row.extra_info["env_path"])
        task = env.task_by_id[row.extra_info["task_id"]]
        if _prior_auth_chain(env, task):
            ep = env.new_episode(task.task_id, seed=0)
            for name, a in ep.golden_chain():
                assert ep.call_tool(name, a).ok
            assert ep.evaluate(ep.golden_answer()).success
            found.append(task.chain)
    assert found, "no 7-tool prior-authorisation chain"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--max-chain", "2"], "--max-chain: 2 < min_chain 3"),
        (["--tau", "1.5"], "--tau: must be in [0, 1)"),
        (["--min-tools", "0"], "--min-tools: must be >= 1"),
    ],
)
def test_envgen_rejects_bad_knobs_before_writing(tmp_path: Path, args: list[str], message: str) -> None:
    out = tmp_path / "x"
    result = CliRunner().invoke(main, ["envgen", "retail", "-n", "1", "-o", str(out), *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert not out.exists()
