"""Step 5 vendors: reachability, write-check order, idempotency, cancel-as-flag, timeouts,
deterministic listings, binding budgets, JSON round trips and import hygiene."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cells.step_04_datatypes import Constraint, ToolResult, passengers_arg
from cells.step_05_vendors import (
    TOOL_NAMES,
    TOOLS,
    ErrorCode,
    describe_schema,
    dispatch,
    new_world,
    tool_docs,
    with_flags,
)
from cells.vendors import cab, restaurant
from cells.vendors.selfcheck import book_cheapest, call, sample_goal

EXPECTED_TOOLS = (
    "airline.search", "airline.book", "airline.cancel", "airline.get_booking", "cab.estimate", "cab.book",
    "cab.cancel", "restaurant.search", "restaurant.order", "restaurant.track", "hotel.search", "hotel.book",
    "hotel.cancel", "payment.get_token", "payment.charge", "payment.refund",
)
DOMAINS = ("airline", "cab", "restaurant", "hotel")


def world_for(domain: str, seed: int = 7, **kw):
    return new_world(sample_goal(domain, seed=seed, **kw), seed)


def token(world):
    res, world = call(world, "payment.get_token", {"scope": "payments.basic"})
    return res.response["payment_token"], world


def airline_booking(world, **extra):
    slots = world.goal.slots
    res, world = call(world, "airline.search", {"from": "HYD", "to": "BLR", "date": slots["date"]})
    flight = min(res.response["flights"], key=lambda f: f["price"])
    tok, world = token(world)
    args = {"flight_id": flight["flight_id"], "date": slots["date"], "passengers": passengers_arg(["Asha Rao", "Vikram Rao"]),
            "payment_token": tok, **extra}
    return args, world


def test_tool_names_are_the_sixteen():
    assert TOOL_NAMES == EXPECTED_TOOLS


def test_goal_write_tools_are_write_tools_of_their_domain():
    """step 4's `GOAL_WRITE_TOOLS` names, for every goal domain, a registered write tool of that domain."""
    from cells.step_04_datatypes import GOAL_DOMAINS, GOAL_WRITE_TOOLS

    assert tuple(GOAL_WRITE_TOOLS) == GOAL_DOMAINS
    for domain, name in GOAL_WRITE_TOOLS.items():
        assert name in TOOLS and TOOLS[name].write and TOOLS[name].domain == domain, name


def test_goal_search_tools_are_read_tools_of_their_domain():
    """step 4's `GOAL_SEARCH_TOOLS` names, for every goal domain, a registered read (non-write) tool of it."""
    from cells.step_04_datatypes import GOAL_DOMAINS, GOAL_SEARCH_TOOLS

    assert tuple(GOAL_SEARCH_TOOLS) == GOAL_DOMAINS
    for domain, name in GOAL_SEARCH_TOOLS.items():
        assert name in TOOLS and not TOOLS[name].write and TOOLS[name].domain == domain, name


def test_every_tool_reachable_with_ok_status():
    ok: set[str] = set()
    for domain in DOMAINS:
        result, world = book_cheapest(world_for(domain))
        assert result.ok, result.response
        ok |= {"payment.get_token", result.tool_name, {"airline": "airline.search", "cab": "cab.estimate",
               "restaurant": "restaurant.search", "hotel": "hotel.search"}[domain]}
        bid = result.response["booking_id"]
        follow = {"airline": ("airline.get_booking", "airline.cancel"), "cab": ("cab.cancel",),
                  "restaurant": ("restaurant.track",), "hotel": ("hotel.cancel",)}[domain]
        for tool in follow:
            args = {"order_id": bid} if tool == "restaurant.track" else {"booking_id": bid}
            res, world = call(world, tool, args, turn=3)
            assert res.ok, res.response
            ok.add(tool)
    tok, world = token(world_for("cab"))
    res, world = call(world, "payment.charge", {"amount_inr": 500, "payment_token": tok})
    assert res.ok
    res, world = call(world, "payment.refund", {"payment_id": res.response["payment_id"]})
    assert res.ok and res.response["refund_inr"] == 500
    assert ok | {"payment.charge", "payment.refund"} == set(TOOL_NAMES)


def _first_timeout() -> ToolResult:
    for seed in range(2000):
        res, _ = dispatch(world_for("cab", seed=seed), "payment.get_token", {}, 1)
        if res.status.value == "timeout":
            return res
    raise AssertionError("no timeout in 2000 seeds")


def _error_calls() -> list[ToolResult]:
    """One call per error code (except TIMEOUT, found by scanning seeds)."""
    out: list[ToolResult] = []
    w = world_for("airline")
    args, w = airline_booking(w)
    out.append(call(w, "nope.tool", {})[0])  # UNKNOWN_TOOL
    out.append(dispatch(w, "airline.search", ["HYD"], 1)[0])  # INVALID_ARGS
    out.append(call(w, "airline.search", {"from": "HYD", "to": "BLR"})[0])  # MISSING_REQUIRED_FIELD
    out.append(call(w, "airline.search", {"from": 5, "to": "BLR", "date": "2026-05-02"})[0])  # INVALID_FIELD_TYPE
    out.append(call(w, "airline.search", {"from": "HYD", "to": "BLR", "date": "2 May"})[0])  # INVALID_FIELD_VALUE
    out.append(call(w, "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02", "x": 1})[0])
    out.append(call(w, "airline.get_booking", {"booking_id": "PNR-missing"})[0])  # NOT_FOUND
    out.append(call(w, "airline.book", {**args, "payment_token": "tok_fake"})[0])  # AUTH_TOKEN_INVALID
    out.append(call(w, "payment.get_token", {"scope": "payments.admin"})[0])  # UNSUPPORTED_SCOPE
    booked, w2 = call(w, "airline.book", args)
    out.append(call(w2, "airline.book", args)[0])  # DUPLICATE_BOOKING
    _cancelled, w3 = call(w2, "airline.cancel", {"booking_id": booked.response["booking_id"]})
    out.append(call(w3, "airline.cancel", {"booking_id": booked.response["booking_id"]})[0])  # ALREADY_CANCELLED
    out.append(call(w3, "payment.refund", {"payment_id": booked.response["payment_id"]})[0])  # ALREADY_REFUNDED
    cut = with_flags(w, "airline", {"earliest_bookable_departure": "23:55"})
    out.append(call(cut, "airline.book", args)[0])  # BOOKING_WINDOW_CLOSED
    res, _ = call(w, "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"})
    tiny = min(res.response["flights"], key=lambda f: f["seats_left"])
    out.append(call(w, "airline.book", {**args, "flight_id": tiny["flight_id"], "passengers": passengers_arg(["A B"] * 60)})[0])
    new = with_flags(w, "payment", {"accepted_scope": "payments.v2"})
    out.append(call(new, "airline.book", args)[0])  # AUTH_SCOPE_INSUFFICIENT
    mfa = with_flags(w, "payment", {"mfa_threshold_inr": 2000})
    out.append(call(mfa, "airline.book", args)[0])  # MFA_REQUIRED
    out.append(call(mfa, "airline.book", {**args, "mfa_code": "000001"})[0])  # MFA_INVALID
    out += _policy_errors()
    out.append(_first_timeout())
    return out


def _policy_errors() -> list[ToolResult]:
    out = []
    w = with_flags(world_for("cab"), "cab", {"unavailable_classes": ["mini"]})
    tok, w = token(w)
    slots = w.goal.slots
    ride = {"pickup": slots["pickup"], "drop": slots["drop"], "vehicle_class": "mini",
            "pickup_time": slots["pickup_time"], "payment_token": tok}
    out.append(call(w, "cab.book", ride)[0])  # VEHICLE_CLASS_UNAVAILABLE
    w = world_for("restaurant")
    tok, w = token(w)
    res, w = call(w, "restaurant.search", {"city": "BLR", "diet": "veg"})
    place = res.response["restaurants"][0]
    cheap = min(place["menu"], key=lambda d: d["price_inr"])
    order = {"restaurant_id": place["restaurant_id"], "items": [{"dish_id": cheap["dish_id"], "qty": 1}],
             "payment_token": tok}
    out.append(call(w, "restaurant.order", order)[0])  # MIN_ORDER_NOT_MET
    order["items"] = [{"dish_id": cheap["dish_id"], "qty": 5}]
    ok, w2 = call(w, "restaurant.order", order)
    assert ok.ok, ok.response
    out.append(call(w2, "restaurant.order", order)[0])  # DUPLICATE_ORDER
    withdrawn = with_flags(w, "restaurant", {"unavailable_dishes": [cheap["name"]]})
    out.append(call(withdrawn, "restaurant.order", order)[0])  # DISH_UNAVAILABLE
    w = world_for("hotel")
    tok, w = token(w)
    stay = {"hotel_id": "HTL-GOI-1", "room_type": "standard", "check_in": "2026-05-02", "check_out": "2026-05-04",
            "rooms": 1, "payment_token": tok}
    out.append(call(with_flags(w, "hotel", {"unavailable_room_types": ["standard"]}), "hotel.book", stay)[0])
    out.append(call(with_flags(w, "hotel", {"gst_required_above_inr": 1000}), "hotel.book", stay)[0])
    return out


def test_every_error_code_reachable_with_hint_and_status():
    results = _error_calls()
    seen = {r.error_code for r in results if not r.ok}
    assert seen == {c.value for c in ErrorCode}, sorted({c.value for c in ErrorCode} - seen)
    for r in results:
        assert r.response["hint"] and r.status.value in ("schema_error", "policy_error", "auth_error",
                                                          "timeout", "not_found")


def test_write_checks_run_in_order_schema_policy_duplicate_payment():
    w = world_for("airline")
    args, w = airline_booking(w)
    bad = {**args, "payment_token": "tok_fake"}
    no_pax = {k: v for k, v in bad.items() if k != "passengers"}
    assert call(w, "airline.book", no_pax)[0].error_code == "MISSING_REQUIRED_FIELD"  # schema beats payment
    cut = with_flags(w, "airline", {"earliest_bookable_departure": "23:55"})
    assert call(cut, "airline.book", bad)[0].error_code == "BOOKING_WINDOW_CLOSED"  # policy beats payment
    _, booked = call(w, "airline.book", args)
    assert call(booked, "airline.book", bad)[0].error_code == "DUPLICATE_BOOKING"  # duplicate beats payment


def test_a_drill_required_argument_is_refused_by_name_then_accepted_and_only_at_its_tool():
    from cells.step_05_vendors import DrillArgumentError, require_argument

    w = world_for("airline")
    args, w = airline_booking(w)
    drilled = require_argument(w, "airline.book", "from", "str")
    refused, after = call(drilled, "airline.book", args)
    assert (refused.error_code, refused.response["field_name"], refused.response["expected"]) == \
        ("MISSING_REQUIRED_FIELD", "from", "str")
    assert after.bookings == ()  # a schema refusal commits nothing
    assert call(drilled, "airline.book", {**args, "from": 5})[0].error_code == "INVALID_FIELD_TYPE"
    booked, after = call(drilled, "airline.book", {**args, "from": "BLR"})
    assert booked.ok and len(after.bookings) == 1
    # the same call in the undrilled world calls `from` unknown, and no other tool changed
    assert call(w, "airline.book", {**args, "from": "BLR"})[0].error_code == "UNKNOWN_FIELD"
    assert describe_schema(drilled, "airline") == describe_schema(w, "airline")  # the docs never name it
    for bad, match in (("airline.fly", "no tool"), ("airline.book", "already declares")):
        with pytest.raises(DrillArgumentError, match=match):
            require_argument(w, bad, "passengers" if bad == "airline.book" else "from", "str")
    with pytest.raises(DrillArgumentError, match="type must be one of"):
        require_argument(w, "airline.book", "from", "city")


def test_a_drill_nested_field_is_refused_in_every_element_by_name_then_accepted_as_an_empty_list():
    from cells.step_05_vendors import DrillArgumentError, require_argument

    w = world_for("airline")
    args, w = airline_booking(w)
    drilled = require_argument(w, "airline.book", "passengers[].loyalty_ids", "list[str]")
    refused, after = call(drilled, "airline.book", args)
    assert (refused.error_code, refused.response["field_name"], refused.response["expected"]) == \
        ("MISSING_REQUIRED_FIELD", "passengers[].loyalty_ids", "list[str] (may be empty)")
    assert after.bookings == ()
    one = [{**args["passengers"][0], "loyalty_ids": []}, args["passengers"][1]]  # every element needs it
    assert call(drilled, "airline.book", {**args, "passengers": one})[0].error_code == "MISSING_REQUIRED_FIELD"
    wrong = [{**p, "loyalty_ids": "none"} for p in args["passengers"]]
    assert call(drilled, "airline.book", {**args, "passengers": wrong})[0].error_code == "INVALID_FIELD_TYPE"
    filled = [{**p, "loyalty_ids": []} for p in args["passengers"]]
    booked, after = call(drilled, "airline.book", {**args, "passengers": filled})
    assert booked.ok and after.bookings[0].details["passengers"] == ["Asha Rao", "Vikram Rao"]  # no drill field
    # undrilled, the same elements carry an unknown key; the docs never name the drill's field
    assert call(w, "airline.book", {**args, "passengers": filled})[0].error_code == "UNKNOWN_FIELD"
    assert describe_schema(drilled, "airline") == describe_schema(w, "airline")
    for name, kind, match in (("flights[].x", "list[str]", "list-of-object arguments"),
                              ("passengers[].", "list[str]", "list-of-object arguments"),
                              ("passengers[].x", "str", "must be of type 'list\\[str\\]'")):
        with pytest.raises(DrillArgumentError, match=match):
            require_argument(w, "airline.book", name, kind)


@pytest.mark.parametrize("code_flags", [
    ("AUTH_TOKEN_INVALID", {}), ("AUTH_SCOPE_INSUFFICIENT", {"accepted_scope": "payments.v2"}),
    ("MFA_REQUIRED", {"mfa_threshold_inr": 2000}),
])
def test_auth_failure_commits_nothing_anywhere(code_flags):
    code, flags = code_flags
    w = world_for("airline")
    args, w = airline_booking(w)
    if flags:
        w = with_flags(w, "payment", flags)
    else:
        args = {**args, "payment_token": "tok_payments.basic_0000"}
    res, after = call(w, "airline.book", args)
    assert res.error_code == code
    assert after is w and after.bookings == () and after.charges == () and after.idempotency == {}


def test_duplicate_is_idempotent_and_cancel_is_a_flag():
    w = world_for("hotel")
    result, w = book_cheapest(w)
    bid = result.response["booking_id"]
    _, _tok_world = token(w)
    again, _ = book_cheapest(w)
    assert again.error_code == "DUPLICATE_BOOKING" and again.response["existing_id"] == bid
    cancelled, w2 = call(w, "hotel.cancel", {"booking_id": bid})
    assert cancelled.ok and cancelled.response["refund_inr"] == result.response["total_inr"]
    assert [b.status for b in w2.bookings] == ["cancelled"] and w2.bookings[0].booking_id == bid
    assert w2.charges[0]["status"] == "refunded" and w.bookings[0].status == "confirmed"  # old world untouched
    rebook, w3 = book_cheapest(w2)  # a cancelled booking no longer blocks the same target
    assert rebook.ok and len(w3.bookings) == 2


def test_booking_details_use_canonical_keys():
    keys = {"airline": {"flight_id", "from", "to", "date", "depart_time", "passenger_count", "passengers"},
            "cab": {"pickup", "drop", "city", "pickup_time", "vehicle_class"},
            "restaurant": {"restaurant_id", "city", "items", "item_count", "diet_tags"},
            "hotel": {"hotel_id", "city", "check_in", "check_out", "nights", "room_type", "rooms", "rating", "gst_number"}}
    for domain, expected in keys.items():
        result, w = book_cheapest(world_for(domain))
        booking = w.bookings[-1]
        assert set(booking.details) == expected
        assert booking.total_inr == result.response["total_inr"] and isinstance(booking.total_inr, int)
    assert len(w.bookings[-1].details["check_in"]) == 10


def test_timeouts_about_one_percent_and_identical_retry_succeeds():
    timeouts = calls = 0
    for seed in range(3000):
        w = world_for("cab", seed=seed)
        res, after = dispatch(w, "cab.estimate", {"pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT"}, 1)
        calls += 1
        if res.status.value == "timeout":
            timeouts += 1
            assert after.bookings == w.bookings and after.flags == w.flags and res.response["error_code"] == "TIMEOUT"
            retry, _ = dispatch(after, "cab.estimate", {"pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT"}, 2)
            assert retry.ok  # the retry counter changes the digest (1e-2 chance of a 2nd timeout: none here)
    assert 0.004 <= timeouts / calls <= 0.02, timeouts


def test_listings_deterministic_and_seed_dependent():
    a1, _ = call(world_for("airline", seed=3), "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"})
    a2, _ = call(world_for("airline", seed=3), "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"})
    b, _ = call(world_for("airline", seed=4), "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"})
    assert a1.response == a2.response and a1.response != b.response
    assert 3 <= len(a1.response["flights"]) <= 8
    f = a1.response["flights"][0]
    assert f["departure"].endswith("+05:30") and f["currency"] == "INR" and "-" in f["flight_id"]


def _options(w) -> tuple[list[int], int]:
    """(totals of every option for the goal's own query, budget)."""
    g, s = w.goal, w.goal.slots
    budget = next(c.value for c in g.constraints if c.name == "total_inr")
    if g.domain == "airline":
        res, _ = call(w, "airline.search", {k: s[k] for k in ("from", "to", "date")})
        return [f["price"] * s["passengers"] for f in res.response["flights"]], budget
    if g.domain == "cab":
        res, _ = call(w, "cab.estimate", {"pickup": s["pickup"], "drop": s["drop"]})
        return [o["fare_inr"] for o in res.response["options"]], budget
    if g.domain == "restaurant":
        res, _ = call(w, "restaurant.search", {"city": s["city"], "diet": s["diet"]})
        return [d["price_inr"] * 2 for r in res.response["restaurants"] for d in r["menu"]], budget
    res, _ = call(w, "hotel.search", {k: s[k] for k in ("city", "check_in", "check_out")})
    return [r["nightly_rate_inr"] * 2 for h in res.response["hotels"] for r in h["rooms"]], budget


SLACK = {"airline": lambda b: 700, "hotel": lambda b: 700, "cab": cab.slack_inr, "restaurant": restaurant.slack_inr}


@pytest.mark.parametrize("domain", DOMAINS)
def test_budgets_bind_some_fit_with_slack_some_do_not(domain):
    low, high = {"airline": (9000, 30000), "cab": (300, 3000), "restaurant": (450, 3000),
                 "hotel": (8000, 30000)}[domain]
    for seed in range(60):
        budget = low + (seed * 7919) % (high - low)
        totals, budget = _options(world_for(domain, seed=seed, budget=budget))
        assert min(totals) <= budget - SLACK[domain](budget), (seed, budget, sorted(totals))
        assert max(totals) > budget, (seed, budget, sorted(totals))


def _money_ok(value, key="") -> bool:
    if isinstance(value, dict):
        return all(_money_ok(v, k) for k, v in value.items())
    if isinstance(value, list):
        return all(_money_ok(v, key) for v in value)
    if key.endswith("_inr") or key in ("price", "total_fare_inr"):
        return isinstance(value, int) and not isinstance(value, bool)
    return True


CALLS = st.sampled_from([
    ("airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"}),
    ("cab.estimate", {"pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT"}),
    ("restaurant.search", {"city": "BLR"}), ("restaurant.search", {"city": "बेंगलुरु", "diet": "veg"}),
    ("hotel.search", {"city": "GOI", "check_in": "2026-05-02", "check_out": "2026-05-04"}),
    ("payment.get_token", {}), ("airline.book", {"flight_id": 3}), ("unknown.tool", {}),
])


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 10**9), domain=st.sampled_from(DOMAINS), pick=CALLS)
def test_every_response_round_trips_json_with_int_money(seed, domain, pick):
    w = world_for(domain, seed=seed)
    res, _ = dispatch(w, pick[0], pick[1], 1)
    booked, _ = book_cheapest(w)
    for r in (res, booked):
        assert ToolResult.from_json(r.to_json()) == r
        assert _money_ok(r.response)


def test_reads_return_same_world_and_writes_a_new_one():
    w = world_for("cab")
    res, after = call(w, "cab.estimate", {"pickup": "BLR:KORAMANGALA", "drop": "BLR:AIRPORT"})
    assert res.ok and after is w
    _booked, after = book_cheapest(w)
    assert after is not w and w.bookings == () and len(after.bookings) == 1


def test_listings_are_memoised_per_episode_and_shared_by_its_worlds():
    w = world_for("restaurant")
    first = restaurant.listings(w, "BOM")
    assert restaurant.listings(w, "BOM") is first  # built once for the episode
    _booked, after = book_cheapest(w)
    assert after is not w and restaurant.listings(after, "BOM") is first  # later Worlds of the episode share it
    fresh = new_world(w.goal, w.seed)  # another episode on the same goal: its own memo, equal listings
    again = restaurant.listings(fresh, "BOM")
    assert again is not first and again == first
    assert fresh.listings_memo is not w.listings_memo and w == dataclasses.replace(w, listings_memo={})


def test_describe_schema_and_docs_reflect_drift():
    w = world_for("airline")
    before = describe_schema(w, "airline")
    assert "passenger_count" not in before["tools"]["airline.book"]["required"] and "schema_version" not in before
    drifted = with_flags(w, "airline", {"requires_passenger_count": True, "price_field": "total_fare_inr"})
    after = describe_schema(drifted, "airline")
    assert "passenger_count" in after["tools"]["airline.book"]["required"] and "schema_version" not in after
    assert "total_fare_inr" in after["tools"]["airline.search"]["response_fields"]
    docs = tool_docs(w, ("airline", "cab", "restaurant", "hotel", "payment"))
    assert tuple(d.name for d in docs) == TOOL_NAMES
    assert all(d.description and set(d.required) <= set(d.args) for d in docs)


def test_constraint_helpers_accept_goal_constraints():
    g = sample_goal("airline", constraints=(Constraint("depart_time", "ge", "11:00"),))
    res, _ = call(new_world(g, 1), "airline.search", {"from": "HYD", "to": "BLR", "date": "2026-05-02"})
    fits = [f for f in res.response["flights"] if f["departure"][11:16] >= "11:00" and f["price"] * 2 <= 13300]
    assert fits


def test_world_is_frozen_and_with_flags_rejects_unknown():
    w = world_for("cab")
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.seed = 1  # type: ignore[misc]
    with pytest.raises(KeyError, match="allowed"):
        with_flags(w, "cab", {"no_such_flag": 1})


def test_import_is_light_and_fast():
    code = ("import sys, time; t=time.perf_counter(); import cells.step_05_vendors, cells.step_06_drift; "
            "d=time.perf_counter()-t; bad=[m for m in ('torch','transformers','trl') if m in sys.modules]; "
            "print(d, bad); assert not bad and d < 1.0, (d, bad)")
    subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)


def test_non_latin_city_ids_resolve_and_track_progresses():
    w = world_for("restaurant")
    tok, w = token(w)
    res, w = call(w, "restaurant.search", {"city": "ಬೆಂಗಳೂರು"})
    place = res.response["restaurants"][0]
    dish = max(place["menu"], key=lambda d: d["price_inr"])
    order, w = call(w, "restaurant.order", {"restaurant_id": place["restaurant_id"], "payment_token": tok,
                                            "items": [{"dish_id": dish["dish_id"], "qty": 3}]}, turn=2)
    assert order.ok, order.response
    states = [call(w, "restaurant.track", {"order_id": order.response["order_id"]}, turn=t)[0]
              .response["delivery_status"] for t in (1, 2, 4, 9)]
    assert states == ["preparing", "preparing", "out_for_delivery", "delivered"]


def test_small_budget_slack_still_absorbs_fee_drifts():
    assert cab.slack_inr(300) >= 180 + 50 and restaurant.slack_inr(450) >= 149 + 50
    assert cab.slack_inr(5000) == 700 == restaurant.slack_inr(5000)


@pytest.mark.parametrize("stage", (1, 2, 3))
def test_every_result_of_played_episodes_is_plain_json(stage):
    """`ToolResult.from_vendor` skips the constructor's JSON walk of the response: what dispatch returns must be
    plain JSON by construction. Played here over both drift sources' patterns and families, by players that
    succeed, fail honestly and call tools at random (error responses included)."""
    from cells.agent.play import play_many
    from cells.agent.policies import ExpertPolicy, NaivePolicy, RandomPolicy
    from cells.codec import require_json_mapping
    from cells.step_10_env import make_env_factory

    results = []
    for policy in (ExpertPolicy, NaivePolicy, RandomPolicy):
        for played in play_many(make_env_factory(stage, drift_source="both"), policy, range(100)):
            results += played.episode.results
    assert len({r.status for r in results}) >= 3  # successes and several kinds of error walked
    for result in results:
        require_json_mapping(result.response, "ToolResult", "response")  # raises on anything but plain JSON
        assert ToolResult.from_json(result.to_json()) == result


def test_a_run_records_the_vendor_api_and_a_reader_refuses_a_run_trained_against_another(tmp_path, capsys):
    import json

    from cells.context import Context
    from cells.step_02_profiles import get_profile
    from cells.step_05_vendors import VENDOR_API_FILE, api_changes, api_signature, run
    from cells.training.warm_start import VendorApiMismatchError, WarmStartError, check_run_vendor_api

    run(Context(profile=get_profile("cpu-smoke"), run_dir=tmp_path))
    recorded = json.loads((tmp_path / VENDOR_API_FILE).read_text(encoding="utf-8"))
    assert recorded == api_signature() and api_changes(recorded) == []
    assert recorded["airline.book"]["args"]["passengers"] == "list[object]"
    assert recorded["airline.book"]["args"]["mfa_code"] == "str?"  # optional arguments marked
    check_run_vendor_api(tmp_path)  # the same API: passes
    # a run from before the airline's passengers became objects, made at a known commit
    recorded["airline.book"]["args"]["passengers"] = "list[str]"
    recorded["cab.estimate"]["fields"] = [*recorded["cab.estimate"]["fields"], "surge"]
    (tmp_path / VENDOR_API_FILE).write_text(json.dumps(recorded), encoding="utf-8")
    (tmp_path / "runtime.json").write_text(json.dumps({"git_sha": "030d05e"}), encoding="utf-8")
    assert api_changes(recorded)[0] == "airline.book passengers: list[str] -> list[object]"
    with pytest.raises(VendorApiMismatchError, match=r"2 change\(s\): airline\.book passengers.*030d05e") as err:
        check_run_vendor_api(tmp_path)
    assert isinstance(err.value, WarmStartError)
    check_run_vendor_api(tmp_path / "older")  # a run from before the record: unchecked
