"""Step 6 drift: catalogue validation, every pattern bites and is adaptable, schedules are pure
and process-independent."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import Any

import pytest

from cells.step_04_datatypes import DOMAINS, DRIFT_KINDS, Constraint, passengers_arg
from cells.step_05_vendors import new_world
from cells.step_06_drift import (
    DriftCatalogueError,
    apply_drift,
    attach_notice,
    build_schedule,
    due_drifts,
    forced_schedule,
    load_catalogue,
    parse_catalogue,
    pattern_by_id,
    requirements_met,
)
from cells.vendors.selfcheck import call, sample_goal

PATTERNS = load_catalogue()
DIET_OK = {"veg": {"veg"}, "egg": {"veg", "egg"}, "non-veg": {"veg", "egg", "non-veg"}}


BUDGETS = {"airline": (9000, 300), "cab": (1200, 40), "restaurant": (1200, 30), "hotel": (7000, 400)}


def goal_for(pattern, seed: int = 11):
    """A goal in the pattern's first domain, budget varied by seed, satisfying its `requires`."""
    domain = pattern.applies_to[0]
    low, step = BUDGETS[domain]
    goal = sample_goal(domain, seed=seed, budget=low + step * (seed % 40))
    assert requirements_met(pattern, goal), pattern.id
    return goal


# --------------------------------------------------------------------------- catalogue

def test_catalogue_covers_kinds_and_domains():
    assert len(PATTERNS) >= 20
    assert {p.kind for p in PATTERNS} == set(DRIFT_KINDS)
    assert {p.domain for p in PATTERNS} == set(DOMAINS)
    assert len({p.id for p in PATTERNS}) == len(PATTERNS)
    for kind in DRIFT_KINDS:
        if kind != "auth":
            assert {p.domain for p in PATTERNS if p.kind == kind} >= {"airline", "cab", "restaurant", "hotel"}


def _raw() -> dict[str, Any]:
    from cells.step_03_data import load_fixture

    doc = load_fixture("drifts.yaml")
    return {"version": doc["version"], "patterns": [dict(p) for p in doc["patterns"]]}


@pytest.mark.parametrize("edit,needle", [
    (lambda p: p.update(kind="weather"), "key 'kind'"),
    (lambda p: p.pop("why"), "key 'why': missing"),
    (lambda p: p.update(mutation={"no_flag": 1}), "key 'mutation'"),
    (lambda p: p.update(trigger=["airline.teleport"]), "key 'trigger'"),
    (lambda p: p.update(evidence={"error_codes": ["NOPE"], "fields": [], "tokens": []}), "key 'error_codes'"),
    (lambda p: p.update(extra=1), "key 'extra': unknown"),
])
def test_bad_entries_raise_naming_file_entry_key_and_allowed(edit, needle):
    doc = _raw()
    edit(doc["patterns"][0])
    with pytest.raises(DriftCatalogueError) as err:
        parse_catalogue(doc)
    msg = str(err.value)
    assert "drifts.yaml" in msg and "airline_price_field_renamed" in msg and needle in msg
    assert "allowed" in msg


def test_duplicate_ids_and_tnc_without_notice_are_rejected():
    doc = _raw()
    doc["patterns"].append(dict(doc["patterns"][0]))
    with pytest.raises(DriftCatalogueError, match="duplicate id"):
        parse_catalogue(doc)
    doc = _raw()
    tnc = next(p for p in doc["patterns"] if p["kind"] == "tnc")
    tnc["notice"] = None
    with pytest.raises(DriftCatalogueError, match="notice"):
        parse_catalogue(doc)


# --------------------------------------------------------------------------- per-pattern bite + adapt

def naive_flow(world, drift_id: str | None):
    """An agent that never adapts: token first (old scope), then the drift fires, then search and
    book the cheapest-looking option with the pre-drift argument set. Returns (results, world, notice)."""
    tok, world = call(world, "payment.get_token", {})
    pay = {"payment_token": tok.response["payment_token"]}
    notice = None
    if drift_id:
        world, event, notice = apply_drift(world, drift_id, turn=2)
        assert event.pattern_id == drift_id and event.turn == 2
    g, s = world.goal, world.goal.slots
    if g.domain == "airline":
        found, world = call(world, "airline.search", {k: s[k] for k in ("from", "to", "date")})
        best = min(found.response["flights"], key=lambda f: f.get("price", 0))
        args = {"flight_id": best["flight_id"], "date": s["date"], "passengers": passengers_arg(g.user.passenger_names), **pay}
        booked, world = call(world, "airline.book", args)
    elif g.domain == "cab":
        found, world = call(world, "cab.estimate", {"pickup": s["pickup"], "drop": s["drop"]})
        best = min(found.response["options"], key=lambda o: o.get("fare_inr", 0))
        booked, world = call(world, "cab.book", {"pickup": s["pickup"], "drop": s["drop"], **pay,
                                                 "vehicle_class": best["vehicle_class"], "pickup_time": s["pickup_time"]})
    elif g.domain == "restaurant":
        found, world = call(world, "restaurant.search", {"city": s["city"], "diet": s["diet"]})
        place = found.response["restaurants"][0]
        dish = min(place["menu"], key=lambda d: d["price_inr"])
        booked, world = call(world, "restaurant.order", {"restaurant_id": place["restaurant_id"], **pay,
                                                         "items": [{"dish_id": dish["dish_id"], "qty": 2}]})
    else:
        found, world = call(world, "hotel.search", {k: s[k] for k in ("city", "check_in", "check_out")})
        hotel = found.response["hotels"][0]
        room = min(hotel["rooms"], key=lambda r: r["nightly_rate_inr"])
        booked, world = call(world, "hotel.book", {"hotel_id": hotel["hotel_id"], "room_type": room["room_type"],
                                                   "check_in": s["check_in"], "check_out": s["check_out"],
                                                   "rooms": s["rooms"], **pay})
    return [found, booked], world, notice


def adapted_flow(world):
    """An agent that reads the post-drift world: current scope, current price field, allowed
    classes/rooms/departures, new required args, diet tags, minimum order. Returns (result, args)."""
    g, s, f = world.goal, world.goal.slots, world.flags
    tok, world = call(world, "payment.get_token", {"scope": f["payment"]["accepted_scope"]})
    pay = {"payment_token": tok.response["payment_token"], "mfa_code": g.user.mfa_code}
    if g.domain == "airline":
        found, world = call(world, "airline.search", {k: s[k] for k in ("from", "to", "date")})
        cut = f["airline"]["earliest_bookable_departure"] or "00:00"
        ok = [x for x in found.response["flights"] if x["departure"][11:16] >= cut and x["seats_left"] >= 2]
        best = min(ok, key=lambda x: x[f["airline"]["price_field"]])
        args = {"flight_id": best["flight_id"], "date": s["date"], "passengers": passengers_arg(g.user.passenger_names),
                "passenger_count": len(g.user.passenger_names), **pay}
        return call(world, "airline.book", args)[0], args
    if g.domain == "cab":
        found, world = call(world, "cab.estimate", {"pickup": s["pickup"], "drop": s["drop"]})
        ok = [o for o in found.response["options"] if o["vehicle_class"] not in f["cab"]["unavailable_classes"]]
        best = min(ok, key=lambda o: o.get("fare_inr", o.get("total_inr")))
        args = {"pickup": s["pickup"], "drop": s["drop"], "vehicle_class": best["vehicle_class"],
                "pickup_time": s["pickup_time"], "city": s["city"], **pay}
        return call(world, "cab.book", args)[0], args
    if g.domain == "restaurant":
        found, world = call(world, "restaurant.search", {"city": s["city"], "diet": s["diet"]})
        place = found.response["restaurants"][0]
        dish = min((d for d in place["menu"] if d["tag"] in DIET_OK[s["diet"]]), key=lambda d: d["price_inr"])
        qty = max(2, -(-place["min_order_inr"] // dish["price_inr"]))
        args = {"restaurant_id": place["restaurant_id"], "items": [{"dish_id": dish["dish_id"], "qty": qty,
                                                                     "modifiers": []}], **pay}
        return call(world, "restaurant.order", args)[0], args
    found, world = call(world, "hotel.search", {k: s[k] for k in ("city", "check_in", "check_out")})
    hotel = found.response["hotels"][0]
    rooms = [r for r in hotel["rooms"] if r["room_type"] not in f["hotel"]["unavailable_room_types"]]
    room = min(rooms, key=lambda r: r["nightly_rate_inr"])
    args = {"hotel_id": hotel["hotel_id"], "room_type": room["room_type"], "check_in": s["check_in"],
            "check_out": s["check_out"], "rooms": s["rooms"], "gst_number": g.user.gstin or "UNREGISTERED", **pay}
    return call(world, "hotel.book", args)[0], args


def _flatten(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [str(k) for k in value] + [x for v in value.values() for x in _flatten(v)]
    if isinstance(value, list):
        return [x for v in value for x in _flatten(v)]
    return [str(value)]


@pytest.mark.parametrize("seed", [11, 6, 38])
@pytest.mark.parametrize("pattern", PATTERNS, ids=lambda p: p.id)
def test_pattern_bites_leaves_evidence_and_is_adaptable(pattern, seed):
    goal = goal_for(pattern, seed)
    base, _, _ = naive_flow(new_world(goal, seed), None)
    assert base[-1].ok, base[-1].response  # without drift the naive agent succeeds
    results, world, notice = naive_flow(new_world(goal, seed), pattern.id)
    # evidence: every listed error code / at least one field / at least one token is observable
    codes = {r.error_code for r in results if not r.ok}
    observed = set(_flatten([r.response for r in results]))
    text = " ".join(observed) + (" " + notice["text"] if notice else "")
    assert set(pattern.evidence.error_codes) <= codes | {"UNSUPPORTED_SCOPE"}, (codes, results[-1].response)
    assert not pattern.evidence.fields or set(pattern.evidence.fields) & observed, observed
    assert not pattern.evidence.tokens or any(t in text for t in pattern.evidence.tokens), text
    if pattern.kind == "tnc":
        assert notice is not None and attach_notice(results[-1], notice).response["_notice"] == notice["text"]
    # bite: the naive agent fails, breaks a constraint, or meets changed terms/fees it must relay
    naive = results[-1]
    allowed = DIET_OK.get(goal.slots.get("diet"), {""})
    broke_diet = naive.ok and not set(naive.response.get("diet_tags", [])) <= allowed
    changed = [r.response for r in results] != [r.response for r in base]
    assert (not naive.ok) or broke_diet or (changed and pattern.kind in ("tnc", "pricing", "schema"))
    # adaptation: reading the post-drift world still completes the goal within budget
    adapted, args = adapted_flow(world if not naive.ok else apply_drift(new_world(goal, seed), pattern.id, 2)[0])
    assert adapted.ok, adapted.response
    budget = next(c.value for c in goal.constraints if c.name == "total_inr")
    assert adapted.response["total_inr"] <= budget
    if pattern.adaptation is not None:
        assert set(pattern.adaptation.args_include) <= set(args) | {"scope"}
    assert set(adapted.response.get("diet_tags", ["veg"])) <= DIET_OK.get(goal.slots.get("diet", "veg"), {"veg"})


# --------------------------------------------------------------------------- schedules

def test_stage_rules_over_many_seeds():
    seen_payment_second = seen_same_domain = 0
    for domain in ("airline", "cab", "restaurant", "hotel"):
        goal = sample_goal(domain)
        for seed in range(60):
            assert build_schedule(1, seed, goal) == ()
            (one,) = build_schedule(2, seed, goal)
            assert one.domain in (domain, "payment") and 2 <= one.min_turn <= 4
            assert domain in pattern_by_id(one.pattern_id).applies_to
            first, second = build_schedule(3, seed, goal)
            assert first.drift_type != second.drift_type and first.domain == domain
            seen_payment_second += second.domain == "payment"
            seen_same_domain += second.domain == domain
    assert seen_payment_second > 20 and seen_same_domain > 20


def test_schedule_is_pure_and_respects_requires():
    goal = sample_goal("cab", constraints=(Constraint("vehicle_class", "eq", "mini"),))
    runs = [build_schedule(3, s, goal) for s in range(80)]
    assert runs == [build_schedule(3, s, goal) for s in range(80)]
    assert len({r for r in runs}) > 5
    assert all(d.pattern_id != "cab_mini_suspended" for r in runs for d in r)
    veg_less = sample_goal("restaurant", slots={"diet": "non-veg"})
    assert all(d.pattern_id != "restaurant_veg_filter_includes_egg"
               for s in range(80) for d in build_schedule(2, s, veg_less))


def test_due_drifts_fire_at_first_trigger_call_after_min_turn():
    sched = forced_schedule("hotel_resort_fee", min_turn=3)
    assert due_drifts(sched, frozenset(), "hotel.search", 2) == ()
    assert due_drifts(sched, frozenset(), "airline.search", 3) == ()
    assert due_drifts(sched, frozenset(), "hotel.search", 3) == sched
    assert due_drifts(sched, frozenset({"hotel_resort_fee"}), "hotel.book", 5) == ()
    pay = forced_schedule("payment_scope_upgrade")
    assert due_drifts(pay, frozenset(), "cab.book", 2) == pay and due_drifts(pay, frozenset(), "cab.estimate", 2) == ()


def test_apply_drift_bumps_schema_version_and_keeps_old_world():
    w = new_world(sample_goal("airline"), 1)
    w2, event, notice = apply_drift(w, "airline_price_field_renamed", 4)
    assert w2.schema_versions["airline"] == 2 and w.schema_versions["airline"] == 1
    assert w.flags["airline"]["price_field"] == "price" and notice is None and event.drift_type == "schema"


DIGEST_SCRIPT = """
import json
from cells.step_04_datatypes import canonical_json, stable_digest
from cells.step_05_vendors import new_world
from cells.vendors.selfcheck import sample_goal
from cells.step_06_drift import build_schedule
from cells.vendors.selfcheck import book_cheapest, call
out = []
for seed in (1, 2, 99):
    for domain in ("airline", "cab", "restaurant", "hotel"):
        w = new_world(sample_goal(domain, seed=seed), seed)
        res, w2 = book_cheapest(w)
        out.append([seed, domain, res.response, [b.booking_id for b in w2.bookings],
                    [s.to_dict() for s in build_schedule(3, seed, w.goal)]])
print(stable_digest(out, size=16).hex())
"""


def test_same_seed_same_world_across_processes_and_hash_seeds():
    digests = []
    for hash_seed in ("1", "2"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed}
        proc = subprocess.run([sys.executable, "-c", DIGEST_SCRIPT], env=env, capture_output=True, text=True,
                              check=True, cwd=os.path.dirname(os.path.dirname(__file__)))
        digests.append(proc.stdout.strip())
    assert digests[0] == digests[1] and len(digests[0]) == 32


def test_predicates_follow_the_vendor_prices(monkeypatch):
    """The `requires` predicates read the vendors' planted prices: moving a price moves the verdict."""
    from cells.step_06_drift import PREDICATES
    from cells.vendors import airline, restaurant

    mfa, min_order = pattern_by_id("payment_mfa_required_hotel"), pattern_by_id("restaurant_min_order_raised")
    flight = sample_goal("airline")
    food = sample_goal("restaurant", slots={"party_size": 3})
    assert PREDICATES["goal_charge_above_mfa_threshold"](flight, mfa)
    assert PREDICATES["goal_budget_allows_min_order"](food, min_order)  # 3 x ₹159 < ₹499
    monkeypatch.setattr(airline, "FARE_FLOOR_INR", mfa.mutation["mfa_threshold_inr"])
    monkeypatch.setattr(restaurant, "DISH_PRICE_CAP_INR", 170)  # 3 x ₹170 >= ₹499: the drift would not bite
    assert not PREDICATES["goal_charge_above_mfa_threshold"](flight, mfa)
    assert not PREDICATES["goal_budget_allows_min_order"](food, min_order)


# --------------------------------------------------------------------------- splits and pools

def _raw_with_splits() -> dict[str, Any]:
    from cells.step_03_data import load_fixture

    doc = load_fixture("drifts.yaml")
    return {"version": doc["version"], "patterns": [dict(p) for p in doc["patterns"]],
            "splits": {name: {"why": s["why"], "reinforced": dict(s["reinforced"]), "unseen": dict(s["unseen"])}
                       for name, s in doc["splits"].items()}}


def test_the_latin_split_partitions_the_catalogue_into_latin_squares_over_vendor_and_kind():
    from cells.step_06_drift import PATTERN_SETS, drift_split

    split = drift_split("latin")
    sets = {which: split.ids(which) for which in PATTERN_SETS}
    assert sum(len(v) for v in sets.values()) == len(PATTERNS)
    assert set().union(*sets.values()) == {p.id for p in PATTERNS}
    for which in ("reinforced", "unseen"):
        withheld = [pattern_by_id(i) for i in sets[which]]
        assert len({p.domain for p in withheld}) == len({p.kind for p in withheld}) == len(withheld) == 4
    demonstrated = [pattern_by_id(i) for i in sets["demonstrated"]]
    assert {p.domain for p in demonstrated} == set(DOMAINS) and {p.kind for p in demonstrated} == set(DRIFT_KINDS)
    assert all(why.strip() for why in {**split.reinforced, **split.unseen}.values())
    assert split.set_of("cab_city_required") == "reinforced" and split.set_of("cab_mini_suspended") == "demonstrated"
    with pytest.raises(DriftCatalogueError, match=r"no drift split 'nope'.*known: \['latin', 'latin-gen'\]"):
        drift_split("nope")


@pytest.mark.parametrize("edit,needle", [
    (lambda s: s["reinforced"].update(no_such_drift="why"), "are not pattern ids"),
    (lambda s: s["unseen"].update(cab_city_required="again"), "also reinforced"),
    (lambda s: s["reinforced"].update(airline_price_field_renamed="a second airline pattern"), "share the domain"),
    (lambda s: s["reinforced"].update(cab_city_required=" "), "say why"),
    (lambda s: s.pop("why"), "allowed (and required) keys"),
    (lambda s: s.update(unseen=["cab_tolls_unbundled"]), "must be a non-empty mapping of pattern id -> why"),
])
def test_bad_splits_raise_naming_the_split_key_and_what_is_allowed(edit, needle):
    from cells.step_06_drift import parse_splits

    doc = _raw_with_splits()
    edit(doc["splits"]["latin"])
    with pytest.raises(DriftCatalogueError) as err:
        parse_splits(doc, parse_catalogue(doc))
    assert "drifts.yaml: split latin" in str(err.value) and needle in str(err.value)


def test_a_split_must_leave_every_vendor_a_demonstrated_pattern():
    """A catalogue whose restaurant has only the two patterns the split withholds: nothing left to combine there."""
    from cells.step_06_drift import parse_splits

    doc = _raw_with_splits()
    kept = {"restaurant_min_order_raised", "restaurant_item_modifiers_required"}
    doc["patterns"] = [p for p in doc["patterns"] if p["domain"] != "restaurant" or p["id"] in kept]
    with pytest.raises(DriftCatalogueError, match="no demonstrated pattern is left for the domain \\['restaurant'\\]"):
        parse_splits(doc, parse_catalogue(doc))


def test_pools_keep_schedules_inside_their_sets_and_favour_what_they_reinforce():
    from cells.step_06_drift import DriftPool, demonstration_pool, drift_split, reinforcement_pool

    split = drift_split("latin")
    demo, rl = demonstration_pool(split), reinforcement_pool(split, 0.8)
    reinforced = split.ids("reinforced")
    drawn_demo, drawn_rl = [], []
    for domain in ("airline", "cab", "restaurant", "hotel"):
        goal = sample_goal(domain)
        for seed in range(120):
            for stage in (2, 3):
                assert build_schedule(stage, seed, goal, None) == build_schedule(stage, seed, goal)
                drawn_demo += [d.pattern_id for d in build_schedule(stage, seed, goal, demo)]
                drawn_rl += [d.pattern_id for d in build_schedule(stage, seed, goal, rl)]
    assert drawn_demo and set(drawn_demo) <= split.ids("demonstrated")
    assert set(drawn_rl) <= split.ids("demonstrated") | reinforced and set(drawn_rl) & reinforced
    even = [d.pattern_id for domain in ("airline", "cab", "restaurant", "hotel") for seed in range(120)
            for d in build_schedule(2, seed, sample_goal(domain), reinforcement_pool(split, 0.0))]
    assert sum(p in reinforced for p in drawn_rl) / len(drawn_rl) > 2 * sum(p in reinforced for p in even) / len(even)
    with pytest.raises(ValueError, match="favoured_share"):
        DriftPool(frozenset({"cab_city_required"}), frozenset(), 1.5)
    with pytest.raises(ValueError, match="not allowed in the pool"):
        DriftPool(frozenset(), frozenset({"cab_city_required"}), 0.5)
    assert build_schedule(2, 1, sample_goal("cab"), DriftPool(frozenset())) == ()  # nothing allowed: no drift
