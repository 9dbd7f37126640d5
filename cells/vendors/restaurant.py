"""Restaurant vendor: search restaurants with menus, place an order, track it.

Dishes are tagged veg / egg / non-veg. For the goal's city, the first restaurant always lets the
goal's diet be met within budget with slack (`slack_inr`: ₹700, less for small food budgets
but always above the ₹149 delivery-fee drift) (its cheapest dish is an egg dish, so a
"veg" filter that starts including egg bites), and another restaurant has a diet-compliant
dish priced above the whole budget.
"""

from __future__ import annotations

from typing import Any

from cells.step_04_datatypes import Booking, GoalSpec, rng_for, stable_id

from .error_codes import ErrorCode, VendorError
from .generic import booking_extras
from .payment import authorize_and_charge
from .registry import REFERENCE_PREFIXES, Arg, Effect, Tool, payment_args
from .world import (
    DEFAULT_FLAGS,
    World,
    commit_booking,
    goal_constraint,
    goal_slot_matches,
    memo_listings,
    norm,
)
from .write_path import booking_view, check_duplicate, find_booking

DISHES = {
    "veg": ("Masala Dosa", "Paneer Butter Masala", "Veg Biryani", "Chole Bhature", "Dal Makhani",
            "Idli Sambar", "Palak Paneer", "Veg Thali"),
    "egg": ("Egg Curry", "Egg Biryani", "Masala Omelette", "Egg Bhurji"),
    "non-veg": ("Chicken Biryani", "Butter Chicken", "Mutton Rogan Josh", "Fish Curry", "Chicken 65"),
}
NAMES = ("Udupi Grand", "Meghana Foods", "Paradise", "Haldiram's", "MTR", "Bikanervala", "Empire", "Anand Bhavan")
DIETS = {"veg": ("veg",), "egg": ("veg", "egg"), "non-veg": ("veg", "egg", "non-veg")}
# The budget-fitting dishes cost at most this, so an order of up to 3 stays under a raised ₹499 minimum
# (that drift bites).
DISH_PRICE_CAP_INR = 159


CHEAPEST_DISH = "Egg Roll"  # opens the planted restaurant's menu: an egg dish, cheaper than every planted fit


def planted_first_dish(goal: GoalSpec) -> str:
    """The first dish on the planted restaurant's menu that the goal's diet allows (the cheapest egg dish comes
    first, then the diet's three planted dishes)."""
    diet = str(goal.slots.get("diet", "veg"))
    tag = diet if diet in DIETS else "veg"
    allowed = tuple(goal_constraint(goal, "diet_tags", "in") or DIETS[tag])
    return CHEAPEST_DISH if "egg" in allowed else DISHES[tag][0]


def planted_dish_count(goal: GoalSpec) -> int:
    """Dishes the planted fit is priced for: the goal's item count or party size, at least 2."""
    return max(int(goal_constraint(goal, "item_count", "ge") or 1), int(goal.slots.get("party_size", 1) or 1), 2)


def slack_inr(budget: int) -> int:
    """Headroom under the budget for the fitting order: ₹700, or a third of a small budget (>= ₹200)."""
    return min(700, max(200, budget // 3))


def _menu(rng: Any) -> list[dict[str, Any]]:
    menu = []
    for tag, count in (("veg", rng.randint(3, 5)), ("egg", rng.randint(1, 2)), ("non-veg", rng.randint(1, 3))):
        for name in rng.sample(DISHES[tag], count):
            menu.append({"name": name, "price_inr": rng.randrange(99, 420, 10), "tag": tag})
    return menu


def _plant_goal_options(world: World, places: list[dict[str, Any]], rng: Any) -> None:
    goal = world.goal
    diet = str(goal.slots.get("diet", "veg"))
    tag = diet if diet in DIETS else "veg"
    budget = goal_constraint(goal, "total_inr", "le") or 1400
    k = planted_dish_count(goal)
    # k dishes clear the pre-drift minimum order, at most DISH_PRICE_CAP_INR a dish
    floor = DEFAULT_FLAGS["restaurant"]["min_order_inr"] + 1
    price = min(DISH_PRICE_CAP_INR, max(-(-floor // k), (budget - slack_inr(budget) - rng.randint(20, 80)) // k))
    anchor = [{"name": n, "price_inr": price + 10 * i, "tag": tag} for i, n in enumerate(DISHES[tag][:3])]
    egg = {"name": CHEAPEST_DISH, "price_inr": max(60, price - 20), "tag": "egg"}
    taken = {d["name"] for d in anchor}
    rest = [{**d, "price_inr": max(d["price_inr"], price + 40)} for d in places[0]["menu"] if d["name"] not in taken]
    places[0]["menu"] = [egg, *anchor, *rest]
    places[1]["menu"] = [*places[1]["menu"], {"name": "Family Feast Platter", "price_inr": budget + 100, "tag": tag}]


@memo_listings
def listings(world: World, city: str) -> list[dict[str, Any]]:
    """Every restaurant in `city` with its full menu; a pure function of seed, city and goal."""
    rng = rng_for(world.seed, "restaurant.search", norm(city))
    places: list[dict[str, Any]] = [{"restaurant_id": f"RST-{norm(city)}-{i + 1}", "name": name, "city": city,
               "rating": rng.randint(35, 49) / 10, "delivery_eta_min": rng.randrange(20, 55, 5), "menu": _menu(rng)}
              for i, name in enumerate(rng.sample(NAMES, rng.randint(4, 6)))]
    if goal_slot_matches(world.goal, "restaurant", city=city):
        _plant_goal_options(world, places, rng)
    for place in places:
        place["menu"] = [{"dish_id": f"D{j + 1:02d}", **dish} for j, dish in enumerate(place["menu"])]
    return places


def search(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Find restaurants delivering in a city, optionally filtered by diet ("veg", "egg", "non-veg").
    Each has a menu of dishes (dish_id, name, price_inr, tag) and a `min_order_inr` subtotal."""
    diet = args.get("diet")
    if diet is not None and diet not in DIETS:
        raise VendorError(ErrorCode.INVALID_FIELD_VALUE, field_name="diet", expected=sorted(DIETS))
    allowed = DIETS[diet] if diet else DIETS["non-veg"]
    if diet == "veg" and world.flag("restaurant", "veg_filter_includes_egg"):
        allowed = ("veg", "egg")
    found = []
    for place in listings(world, args["city"]):
        menu = [d for d in place["menu"] if d["tag"] in allowed]
        if menu:
            found.append({**place, "menu": menu, "min_order_inr": world.flag("restaurant", "min_order_inr")})
    return {"restaurants": found}, world


def _lines(world: World, place: dict[str, Any], items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Validate order items against the menu; returns canonical lines {dish_id, qty, tag, price_inr}."""
    menu = {d["dish_id"]: d for d in place["menu"]}
    needs_mods = world.flag("restaurant", "items_require_modifiers")
    lines = []
    for item in items:
        extra = sorted(set(item) - {"dish_id", "qty", "modifiers"})
        if extra:
            raise VendorError(ErrorCode.UNKNOWN_FIELD, field_name=f"items[].{extra[0]}",
                              allowed=["dish_id", "qty", "modifiers"])
        if needs_mods and "modifiers" not in item:
            raise VendorError(ErrorCode.MISSING_REQUIRED_FIELD, field_name="items[].modifiers",
                              expected="list[str] (may be empty)")
        qty = item.get("qty", 1)
        if not isinstance(qty, int) or isinstance(qty, bool) or qty < 1 or \
                not isinstance(item.get("modifiers", []), list):
            raise VendorError(ErrorCode.INVALID_FIELD_TYPE, field_name="items[]",
                              expected="{dish_id: str, qty: int >= 1, modifiers: list}")
        dish = menu.get(item.get("dish_id"))
        if dish is None:
            raise VendorError(ErrorCode.NOT_FOUND, field_name="items[].dish_id", got=item.get("dish_id"))
        lines.append({"dish_id": dish["dish_id"], "qty": qty, "tag": dish["tag"], "price_inr": dish["price_inr"]})
    return lines


def _find_place(world: World, restaurant_id: str) -> dict[str, Any]:
    parts = restaurant_id.split("-")
    city = parts[1] if len(parts) == 3 else ""
    for place in listings(world, city) if city else []:
        if place["restaurant_id"] == restaurant_id:
            return place
    raise VendorError(ErrorCode.NOT_FOUND, field_name="restaurant_id", got=restaurant_id)


def _check_dishes(place: dict[str, Any], lines: list[dict[str, Any]], unavailable: list[str]) -> None:
    """Policy: no line may order a dish withdrawn from ordering (by name); the refusal lists what still is."""
    if not unavailable:
        return
    names = {d["dish_id"]: d["name"] for d in place["menu"]}
    refused = next((x["dish_id"] for x in lines if names[x["dish_id"]] in unavailable), None)
    if refused is not None:
        raise VendorError(ErrorCode.DISH_UNAVAILABLE, dish_id=refused,
                          available=[d["dish_id"] for d in place["menu"] if d["name"] not in unavailable])


def order(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Order dishes for delivery: `items` is a list of {"dish_id": ..., "qty": n} from one
    restaurant's menu. Pays with `payment_token`; returns `order_id` and the `total_inr` charged."""
    # 1. schema: top-level fields checked by dispatch; item shape checked here.
    place = _find_place(world, args["restaurant_id"])
    lines = _lines(world, place, args["items"])
    flags = world.flags["restaurant"]
    subtotal = sum(line["qty"] * line["price_inr"] for line in lines)
    # 2. policy
    _check_dishes(place, lines, flags["unavailable_dishes"])
    if subtotal < flags["min_order_inr"]:
        raise VendorError(ErrorCode.MIN_ORDER_NOT_MET, min_order_inr=flags["min_order_inr"], got_total_inr=subtotal)
    # 3. duplicate
    key = f"restaurant|{place['restaurant_id']}|" + ",".join(sorted(f"{x['dish_id']}x{x['qty']}" for x in lines))
    check_duplicate(world, key, ErrorCode.DUPLICATE_ORDER)
    # 4. payment
    fees, shown = booking_extras(flags)
    total = subtotal + flags["delivery_fee_inr"] + fees
    paid, payment_id = authorize_and_charge(world, total, args["payment_token"], args.get("mfa_code"),
                                            turn, "restaurant.order")
    # 5. id generation + commit
    details = {"restaurant_id": place["restaurant_id"], "city": place["city"], "items": lines,
               "item_count": sum(x["qty"] for x in lines), "diet_tags": sorted({x["tag"] for x in lines})}
    booking = Booking(stable_id(REFERENCE_PREFIXES["restaurant"], world.seed, key, len(world.bookings)), "restaurant", "restaurant.order",
                      "confirmed", details, total, turn, payment_id)
    response = {**booking_view(booking), "order_id": booking.booking_id, "subtotal_inr": subtotal,
                "eta_min": place["delivery_eta_min"]}
    if flags["delivery_fee_inr"]:
        response["delivery_fee_inr"] = flags["delivery_fee_inr"]
    return {**response, **shown}, commit_booking(paid, booking, key)


def track(world: World, args: dict[str, Any], turn: int) -> tuple[dict[str, Any], World]:
    """Track an order by `order_id`: preparing, out_for_delivery or delivered."""
    booking = find_booking(world, "restaurant", args["order_id"])
    stage = ("preparing", "preparing", "out_for_delivery", "out_for_delivery", "delivered")
    status = stage[min(4, max(0, turn - booking.turn))] if booking.live else "cancelled"
    return {**booking_view(booking), "order_id": booking.booking_id, "delivery_status": status}, world


TOOLS: tuple[Tool, ...] = (
    Tool("restaurant.search", search,
         lambda f: (Arg("city", "str", True, "city name or code"),
                    Arg("diet", "str", False, 'one of "veg", "egg", "non-veg"')),
         lambda f: ("restaurant_id", "name", "rating", "min_order_inr", "menu", "dish_id", "price_inr", "tag")),
    Tool("restaurant.order", order,
         lambda f: (Arg("restaurant_id", "str", True, "restaurant_id from restaurant.search"),
                    Arg("items", "list[object]", True, "[{dish_id, qty" + (", modifiers: list" if
                        f["items_require_modifiers"] else "") + "}]"), *payment_args()),
         lambda f: ("order_id", "status", "total_inr", "subtotal_inr", "payment_id", "eta_min",
                    *(("delivery_fee_inr",) if f["delivery_fee_inr"] else ())), Effect.COMMIT),
    Tool("restaurant.track", track, lambda f: (Arg("order_id", "str", True, "order_id from restaurant.order"),),
         lambda f: ("order_id", "delivery_status", "total_inr")),
)
