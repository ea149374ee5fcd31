"""Rubric and spec hardening (issue 13 items 5-6): a required output is never empty, so no answer
meets it by saying anything; every spec key is honoured or rejected with its key path."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from longcat_plugins.environments.contract import SpecError
from longcat_plugins.environments.domain import BaseDB, DBView
from longcat_plugins.environments.generate import EnvironmentGenerator
from longcat_plugins.environments.rubric import evaluate, renderings
from longcat_plugins.environments.spec import BUILTIN_SPECS, OP_KEYS, load_spec, parse_spec

DOMAINS = ("retail", "travel", "food_delivery")


def _view() -> DBView:
    return DBView(BaseDB(load_spec("retail"), {}))


@pytest.mark.parametrize("value", ["", "   ", None])
def test_an_empty_required_output_is_never_met(value: Any) -> None:
    for stored in (None, [""], ["", " "]):
        item: dict[str, Any] = {"kind": "output", "name": "get_booking.confirmation", "value": value}
        if stored is not None:
            item["renderings"] = stored
        for answer in ("Sure: done", "", "The confirmation is .", "Done. "):
            out = evaluate(_view(), [item], answer)
            assert not out.success and out.score == 0.0, (value, stored, answer)
    assert renderings("") == [] and renderings(None) == []
    # a real value is still found, and only when stated
    item = {"kind": "output", "name": "x", "value": "K7Q2ZD", "renderings": renderings("K7Q2ZD")}
    assert evaluate(_view(), [item], "Your code is K7Q2ZD.").success
    assert not evaluate(_view(), [item], "Sure: done").success


@pytest.mark.parametrize("domain", DOMAINS)
def test_generated_tasks_never_require_an_empty_output(domain: str) -> None:
    """On main, travel seed 0 asked for a booking's empty confirmation (a create default) 9 times in
    200 environments, food_delivery once; a rubric any answer meets."""
    gen = EnvironmentGenerator(load_spec(domain), seed=0)
    outputs = 0
    for i in range(150):  # covers the cases found on main (travel 35.., food_delivery 134)
        env = gen.generate(i)
        for task in env.tasks:
            for item in task.rubric:
                if item["kind"] == "output":
                    outputs += 1
                    assert renderings(item["value"]), (task.task_id, item)
                    assert not evaluate(_view(), [item], "Sure: done").success, (task.task_id, item)
    assert outputs > 250


def _retail(mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    raw = yaml.safe_load((BUILTIN_SPECS / "retail.yaml").read_text())
    mutate(raw)
    return raw


def _tool(raw: dict[str, Any], name: str) -> dict[str, Any]:
    return next(t for t in raw["tools"] if t["name"] == name)


def _index(name: str) -> int:
    raw = yaml.safe_load((BUILTIN_SPECS / "retail.yaml").read_text())
    return next(i for i, t in enumerate(raw["tools"]) if t["name"] == name)


# (mutation, the key path the error must name, a word of the reason)
BAD_KEYS: list[tuple[Callable[[dict[str, Any]], None], str, str]] = [
    # the audit's case: require on a non-create tool was accepted and ignored
    (
        lambda r: _tool(r, "update_customer_phone").update(require={"customer_id": {"tier": ["gold"]}}),
        f"tools[{_index('update_customer_phone')}](update_customer_phone).require",
        "used only by op ['create', 'transition']",
    ),
    # require on a transition names a ref argument it does not take
    (
        lambda r: _tool(r, "cancel_order").update(require={"customer_id": {"tier": ["gold"]}}),
        f"tools[{_index('cancel_order')}](cancel_order).require.customer_id",
        "must be a ref field listed in args",
    ),
    (
        lambda r: _tool(r, "find_customer_by_email").update(when={"tier": ["gold"]}),
        f"tools[{_index('find_customer_by_email')}](find_customer_by_email).when",
        "a find tool takes",
    ),
    (
        lambda r: _tool(r, "get_customer_profile").update(by="email"),
        f"tools[{_index('get_customer_profile')}](get_customer_profile).by",
        "used only by op",
    ),
    (
        lambda r: _tool(r, "delete_address").update(defaults={"is_default": True}),
        f"tools[{_index('delete_address')}](delete_address).defaults",
        "used only by op ['create']",
    ),
    (
        lambda r: _tool(r, "update_customer_phone").update(verb="set"),
        f"tools[{_index('update_customer_phone')}](update_customer_phone).verb",
        "used only by op ['transition']",
    ),
    (
        lambda r: _tool(r, "cancel_order").update(when={"status": ["shipped_maybe"]}),
        f"tools[{_index('cancel_order')}](cancel_order).when.status",
        "'shipped_maybe' is not one of",
    ),
    (
        lambda r: _tool(r, "cancel_order").update(when={"customer_id.nickname": ["x"]}),
        f"tools[{_index('cancel_order')}](cancel_order).when.customer_id.nickname",
        "no field 'nickname' in customer",
    ),
    (
        lambda r: _tool(r, "cancel_order").update(when={"status.tier": ["gold"]}),
        f"tools[{_index('cancel_order')}](cancel_order).when.status.tier",
        "not a ref field",
    ),
    (
        lambda r: _tool(r, "create_order").update(defaults={**_tool(r, "create_order")["defaults"], "status": "lost"}),
        f"tools[{_index('create_order')}](create_order).defaults.status",
        "'lost' is not one of",
    ),
    (
        lambda r: r["entities"]["customer"]["fields"]["city"].update(values=["Oslo"]),
        "entities.customer.fields.city.values",
        "not used by a city field",
    ),
    (
        lambda r: r["entities"]["order"]["fields"]["placed_on"].update(min=3),
        "entities.order.fields.placed_on.min",
        "not used by a date field",
    ),
    (
        lambda r: r["entities"]["order"]["fields"]["status"].update(unique=True),
        "entities.order.fields.status.unique",
        "not used by a enum field",
    ),
    (
        lambda r: r["entities"]["customer"]["fields"]["loyalty_points"].update(min=10, max=2),
        "entities.customer.fields.loyalty_points.min",
        "> max",
    ),
    (
        lambda r: r["entities"]["customer"].update(unique_together=[["name", "tier"]]),
        "entities.customer.unique_together[0]",
        "not value fields",
    ),
    (
        lambda r: _tool(r, "find_customer_by_email").update(by=["email", "phone"]),
        f"tools[{_index('find_customer_by_email')}](find_customer_by_email).by",
        "unique_together group",
    ),
    (lambda r: r.update(domain="my domain"), "domain", "must be an identifier"),
]


@pytest.mark.parametrize(("mutate", "path", "why"), BAD_KEYS, ids=[p for _, p, _ in BAD_KEYS])
def test_every_spec_key_is_honoured_or_rejected_with_its_path(
    tmp_path: Path, mutate: Callable[[dict[str, Any]], None], path: str, why: str
) -> None:
    p = tmp_path / "retail_bad.yaml"
    p.write_text(yaml.safe_dump(_retail(mutate)))
    with pytest.raises(SpecError) as exc:
        load_spec(p)
    msg = str(exc.value)
    assert str(p) in msg
    line = next((x for x in msg.splitlines() if f"{path}:" in x), "")
    assert line and why in line, msg


def test_every_op_key_is_consumed() -> None:
    """Each key an op accepts changes the parsed tool (it is honoured, not just allowed)."""
    raw = yaml.safe_load((BUILTIN_SPECS / "retail.yaml").read_text())
    base = parse_spec(raw).tools
    cases = {
        "description": ("get_customer_profile", {"description": "Everything."}, lambda t: t.description),
        "verb": ("cancel_order", {"verb": "void"}, lambda t: t.verb),
        "when": ("update_customer_phone", {"when": {"tier": ["gold"]}}, lambda t: t.when),
        "when_any": (
            "update_customer_phone",
            {"when_any": [{"tier": ["gold"]}, {"newsletter": [True]}]},
            lambda t: t.when_any,
        ),
        "fields": ("get_customer_profile", {"fields": ["tier"]}, lambda t: t.fields),
    }
    for key, (name, change, read) in cases.items():
        mutated = yaml.safe_load((BUILTIN_SPECS / "retail.yaml").read_text())
        _tool(mutated, name).update(change)
        assert read(parse_spec(mutated).tools[name]) != read(base[name]), key
    assert set(OP_KEYS["transition"]) >= {"require", "args", "when_any"}
