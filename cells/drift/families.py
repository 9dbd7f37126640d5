"""Drift families: `cells/data/drift_families.yaml` validated on load, and every instance a pure function of its id.

A family is a parametrised transformation of the vendors' API (its `mechanism`, one of `MECHANISMS`, driven by
the generic vendor flags of `cells/vendors/generic.py`). Its `sites` say where it applies per domain and which
values each parameter draws from; an instance is one site and one value per parameter. The id spells them out,
`gen/<family>/<domain>/<site>/<value>/...`, so `instance(id)` rebuilds the same instance in any process and an
episode's log alone is enough to score it. `Instance` carries everything step 6 needs to schedule, apply and
judge it: its flags (`mutation`), trigger tools, evidence and expected adaptation (from the family's templates),
what the user pays, the notice in each language, the goal predicates it needs (`requires`, step 6's names).

`combination(instance)` is its (family, domain, tool, field): what a split holds out as one recovery, whatever
the new name or amount (a generated nested required field at `restaurant.order` is the same combination as the
hand-written `restaurant_item_modifiers_required`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from cells.errors import DriftCallError
from cells.step_04_datatypes import (
    DOMAINS,
    DRIFT_KINDS,
    GOAL_DOMAINS,
    GOAL_SEARCH_TOOLS,
    GOAL_WRITE_TOOLS,
    LANGUAGES,
)
from cells.step_05_vendors import DEFAULT_FLAGS, TOOL_NAMES, ErrorCode
from cells.tasks.i18n import money
from cells.vendors.generic import ARG_FORMATS, USER_FACTS

FAMILIES_FILE = "drift_families.yaml"
PREFIX = "gen"  # every generated instance id starts "gen/"
SEP = "/"
MECHANISMS = ("rename_field", "require_arg", "require_item_field", "arg_format", "set_flag", "booking_fee",
              "term_notice")
UNITS = ("percent", "rupees")  # how a terms value is shown to the user: "20%", "₹300"
FAMILY_KEYS = ("kind", "what", "mechanism", "params", "sites", "evidence", "adaptation", "description", "why")
OPTIONAL_FAMILY_KEYS = ("site", "user_pays")
TEMPLATE_KEYS = ("evidence", "adaptation", "description", "why", "user_pays")  # a site may override these


class FamilyError(DriftCallError, ValueError):
    """drift_families.yaml is malformed, or an id names no instance; the message names the file, family, site, key
    and what is allowed."""


@dataclass(frozen=True)
class Site:
    """Where a family applies in one domain: its attributes (tool, field, flag, ...) and each parameter's values."""

    family: str
    domain: str
    id: str
    attrs: dict[str, Any]
    values: tuple[tuple[str, tuple[Any, ...]], ...]

    def count(self) -> int:
        n = 1
        for _, options in self.values:
            n *= len(options)
        return n


@dataclass(frozen=True)
class Family:
    """One family as declared (its templates are filled per instance)."""

    name: str
    kind: str
    what: str
    mechanism: str
    params: tuple[str, ...]
    templates: dict[str, Any]
    sites: tuple[Site, ...]
    defaults: dict[str, Any] = field(default_factory=dict)  # the attributes every site starts from


@dataclass(frozen=True)
class Instance:
    """One generated drift, shaped like a catalogue pattern (step 6 wraps it as a `DriftPattern`)."""

    id: str
    family: str
    kind: str
    domain: str
    site: str
    tool: str
    field: str
    values: dict[str, Any]
    applies_to: tuple[str, ...]
    trigger: tuple[str, ...]
    mutation: dict[str, Any]
    evidence: dict[str, tuple[str, ...]]
    adaptation: tuple[str, tuple[str, ...]] | None
    description: str
    why: str
    requires: tuple[str, ...] = ()
    user_pays: str | None = None
    notices: dict[str, str] | None = None  # the terms notice per language
    notice_token: str | None = None
    user_args: tuple[tuple[str, str], ...] = ()  # (argument, the user topic that supplies it)


def _fail(family: str, site: str, key: str, message: str) -> FamilyError:
    return FamilyError(f"{FAMILIES_FILE}: family {family}: site {site}: key {key!r}: {message}")


def _flat(values: Any) -> list[Any]:
    """A value list whose items may be lists (a lexicon spliced in with a YAML alias), flattened."""
    return [v for item in values for v in (_flat(item) if isinstance(item, list) else [item])]


def _options(raw: Any, where: tuple[str, str, str]) -> tuple[Any, ...]:
    if isinstance(raw, dict) and set(raw) == {"from", "to", "step"} and all(isinstance(v, int) for v in raw.values()):
        out: tuple[Any, ...] = tuple(range(raw["from"], raw["to"] + 1, raw["step"]))
    elif isinstance(raw, list):
        out = tuple(_flat(raw))
    else:
        raise _fail(*where, "must be a list of values or a range {from, to, step}")
    bad = [v for v in out if not isinstance(v, (str, int)) or isinstance(v, bool) or SEP in str(v) or not str(v)]
    if not out or bad or len(set(map(str, out))) != len(out):
        raise _fail(*where, f"needs distinct non-empty str or int values without {SEP!r}; got {bad or list(out)}")
    return out


def _resolve_tool(name: str, domain: str, attrs: dict[str, Any], where: tuple[str, str, str]) -> str:
    """`write` / `search`: the goal domain's booking / search tool (a payment site: of its one `applies_to`)."""
    if name in ("write", "search"):
        applies = attrs.get("applies_to") or [domain]
        goal = domain if domain in GOAL_DOMAINS else (applies[0] if len(applies) == 1 else None)
        if goal is None:
            raise _fail(*where, "a payment site with `tool: write` applies to exactly one goal domain")
        return (GOAL_WRITE_TOOLS if name == "write" else GOAL_SEARCH_TOOLS)[goal]
    if name not in TOOL_NAMES:
        raise _fail(*where, f"{name!r} is not a tool; allowed: write, search, {list(TOOL_NAMES)}")
    return name


def _check_mechanism(mechanism: str, domain: str, attrs: dict[str, Any], where: tuple[str, str, str]) -> None:
    """The attributes each mechanism needs (named in the error)."""
    need = {"rename_field": ("field",), "arg_format": ("field", "type"), "set_flag": ("flag", "field"),
            "term_notice": ("field", "unit", "notice", "user_pays"), "require_arg": (), "require_item_field": (),
            "booking_fee": ()}[mechanism]
    missing = [k for k in need if k not in attrs]
    if missing:
        raise _fail(*where[:2], missing[0], f"the {mechanism} mechanism needs {list(need)}")
    if mechanism == "require_arg" and sum(k in attrs for k in ("same_as", "ask_user", "found_in")) != 1:
        raise _fail(*where[:2], "same_as", "a required argument takes its value from one of same_as, ask_user, found_in")
    if mechanism == "require_item_field" and not (attrs.get("empty_list") or "found_in" in attrs):
        raise _fail(*where[:2], "empty_list", "an item field is an empty list (empty_list: true) or found_in a listing")
    if mechanism == "require_item_field" and not str(attrs.get("field", "")).endswith("[]"):
        raise _fail(*where[:2], "field", "an item field's site names its list argument, as `items[]`")
    if "found_in" in attrs and "listing_key" not in attrs:
        raise _fail(*where[:2], "listing_key", "found_in needs the listing item's id key (e.g. flight_id)")
    if "ask_user" in attrs and attrs["ask_user"] not in USER_FACTS:
        raise _fail(*where[:2], "ask_user", f"{attrs['ask_user']!r}; allowed: {sorted(USER_FACTS)}")
    if mechanism == "arg_format" and attrs["type"] not in ARG_FORMATS:
        raise _fail(*where[:2], "type", f"{attrs['type']!r}; allowed: {sorted(ARG_FORMATS)}")
    if mechanism == "set_flag" and attrs["flag"] not in DEFAULT_FLAGS[domain]:
        raise _fail(*where[:2], "flag", f"{attrs['flag']!r}; allowed: {sorted(DEFAULT_FLAGS[domain])}")
    if mechanism == "term_notice":
        if attrs["unit"] not in UNITS:
            raise _fail(*where[:2], "unit", f"{attrs['unit']!r}; allowed: {list(UNITS)}")
        notice = attrs["notice"]
        if not isinstance(notice, dict) or set(notice) != set(LANGUAGES) or not all("{shown}" in t for t in notice.values()):
            raise _fail(*where[:2], "notice", f"one text per language {list(LANGUAGES)}, each with {{shown}}")
    if "error_code" in attrs and attrs["error_code"] not in {c.value for c in ErrorCode}:
        raise _fail(*where[:2], "error_code", f"{attrs['error_code']!r} is not a vendor error code")


def _parse_family(name: str, raw: Any) -> Family:
    where = (name, "*")
    if not isinstance(raw, dict):
        raise _fail(*where, "*", f"each family is a mapping; keys: {list(FAMILY_KEYS + OPTIONAL_FAMILY_KEYS)}")
    missing = [k for k in FAMILY_KEYS if k not in raw]
    unknown = sorted(set(raw) - set(FAMILY_KEYS) - set(OPTIONAL_FAMILY_KEYS))
    if missing or unknown:
        key = (missing or unknown)[0]
        raise _fail(*where, key, f"{'missing' if missing else 'unknown'}; allowed: {list(FAMILY_KEYS + OPTIONAL_FAMILY_KEYS)}")
    if raw["kind"] not in DRIFT_KINDS:
        raise _fail(*where, "kind", f"{raw['kind']!r}; allowed: {list(DRIFT_KINDS)}")
    if raw["mechanism"] not in MECHANISMS:
        raise _fail(*where, "mechanism", f"{raw['mechanism']!r}; allowed: {list(MECHANISMS)}")
    params = raw["params"]
    if not isinstance(params, list) or not params or not all(isinstance(p, str) for p in params):
        raise _fail(*where, "params", "a non-empty list of parameter names")
    if raw["kind"] == "pricing" and not raw.get("user_pays"):
        raise _fail(*where, "user_pays", "pricing families change what the user pays: say what")
    defaults = dict(raw.get("site") or {})
    sites = []
    if not isinstance(raw["sites"], dict) or not raw["sites"]:
        raise _fail(*where, "sites", f"a mapping of domain -> list of sites; domains: {list(DOMAINS)}")
    for domain, entries in raw["sites"].items():
        if domain not in DOMAINS or not isinstance(entries, list) or not entries:
            raise _fail(*where, "sites", f"{domain!r}: a domain of {list(DOMAINS)} with a non-empty list of sites")
        for entry in entries:
            sites.append(_parse_site(name, raw["mechanism"], tuple(params), domain, {**defaults, **entry}))
    ids = [(s.domain, s.id) for s in sites]
    if len(set(ids)) != len(ids):
        raise _fail(*where, "id", "site ids must be unique within a family and domain")
    templates = {k: raw.get(k) for k in TEMPLATE_KEYS}
    return Family(name, raw["kind"], str(raw["what"]), raw["mechanism"], tuple(params), templates, tuple(sites),
                  defaults)


def _parse_site(family: str, mechanism: str, params: tuple[str, ...], domain: str, raw: dict[str, Any]) -> Site:
    site_id = str(raw.get("id", ""))
    if not site_id or SEP in site_id:
        raise _fail(family, f"{domain}/?", "id", f"each site needs an id without {SEP!r}")
    where = (family, f"{domain}/{site_id}")
    values = tuple((p, _options(raw.get(p), (*where, p))) for p in params)
    attrs = {k: v for k, v in raw.items() if k not in params and k != "id"}
    attrs["tool"] = _resolve_tool(str(attrs.get("tool", "write")), domain, attrs, (*where, "tool"))
    _check_mechanism(mechanism, domain, attrs, (*where, "*"))
    return Site(family, domain, site_id, attrs, values)


@cache
def load_families() -> dict[str, Family]:
    """The validated families of cells/data/drift_families.yaml (cached)."""
    from cells.step_03_data import load_fixture

    return parse_families(load_fixture(FAMILIES_FILE))


def parse_families(payload: Any) -> dict[str, Family]:
    """Validate a parsed drift_families.yaml document; every site's first instance is built, so a template naming
    an unknown placeholder fails here, not mid-episode."""
    raw = payload.get("families") if isinstance(payload, dict) else None
    if not isinstance(raw, dict) or not raw:
        raise FamilyError(f"{FAMILIES_FILE}: top level needs `version` and a mapping `families`")
    families = {str(name): _parse_family(str(name), body) for name, body in raw.items()}
    for fam in families.values():
        for site in fam.sites:
            build(fam, site, {p: options[0] for p, options in site.values})
    return families


def family_of(name: str) -> Family:
    families = load_families()
    if name not in families:
        raise FamilyError(f"no drift family {name!r}; known: {sorted(families)}")
    return families[name]


# --- instances ------------------------------------------------------------------------------------------------


def instance_id(family: str, domain: str, site: str, values: dict[str, Any], params: tuple[str, ...]) -> str:
    return SEP.join([PREFIX, family, domain, site, *(str(values[p]) for p in params)])


def is_generated(pattern_id: str) -> bool:
    return pattern_id.startswith(PREFIX + SEP)


def site_instances(fam: Family, site: Site) -> Iterator[Instance]:
    """Every instance of one site, in declaration order of its values."""
    names = [p for p, _ in site.values]
    for combo in itertools.product(*(options for _, options in site.values)):
        yield build(fam, site, dict(zip(names, combo, strict=True)))


@cache
def all_instances() -> tuple[Instance, ...]:
    """Every generated instance of every family, sites and values in declaration order."""
    return tuple(inst for fam in load_families().values() for site in fam.sites for inst in site_instances(fam, site))


@cache
def instance(pattern_id: str) -> Instance:
    """The instance an id names (`FamilyError` naming what is wrong otherwise)."""
    parts = pattern_id.split(SEP)
    if len(parts) < 5 or parts[0] != PREFIX:
        raise FamilyError(f"{pattern_id!r} is not a generated drift id ({PREFIX}/<family>/<domain>/<site>/<value>...)")
    fam = family_of(parts[1])
    site = next((s for s in fam.sites if s.domain == parts[2] and s.id == parts[3]), None)
    if site is None or len(parts) != 4 + len(fam.params):
        raise FamilyError(f"{pattern_id!r}: family {fam.name} has no site {parts[2]}/{parts[3]} with "
                          f"{len(fam.params)} values; its sites: {[f'{s.domain}/{s.id}' for s in fam.sites]}")
    chosen = {}
    for (param, options), text in zip(site.values, parts[4:], strict=True):
        match = next((v for v in options if str(v) == text), None)
        if match is None:
            raise FamilyError(f"{pattern_id!r}: {param} {text!r} is not one of {list(options)}")
        chosen[param] = match
    return build(fam, site, chosen)


def combination(inst: Instance) -> tuple[str, str, str, str]:
    """(family, domain, tool, field): the recovery a split holds out as one, whatever the values."""
    return inst.family, inst.domain, inst.tool, inst.field


def named_combination(family: str, domain: str, applies_to: tuple[str, ...], field_name: str | None
                      ) -> tuple[str, str, str, str]:
    """The combination of a hand-written pattern that names `family` (and a `field`, else the family's)."""
    fam = family_of(family)
    where = (family, f"{domain}/<named>", "field")
    name = field_name or fam.defaults.get("field")
    if not name:
        raise _fail(*where, f"family {family} declares no default field: name the pattern's `field`")
    attrs = {**fam.defaults, "applies_to": list(applies_to)}
    return family, domain, _resolve_tool(str(attrs.get("tool", "write")), domain, attrs, where), str(name)


# --- building one instance ------------------------------------------------------------------------------------


def words(name: str) -> str:
    """A field name as the user hears it: "platform_fee_inr" -> "platform fee"."""
    for suffix in ("_inr", "_pct"):
        name = name.removesuffix(suffix)
    return name.replace("_", " ")


def _shown(site: Site, values: dict[str, Any]) -> str:
    """The instance's figure as the user hears it: "20%", "₹300", else the value itself."""
    value = values.get("value", values.get("amount"))
    unit = site.attrs.get("unit")
    if unit == "percent":
        return f"{value}%"
    if unit == "rupees":
        return money(int(str(value)))
    return str(value)


def _source(attrs: dict[str, Any]) -> str:
    if "same_as" in attrs:
        return f"same value as `{attrs['same_as']}`"
    if "ask_user" in attrs:
        return f"the user's {attrs['ask_user']}"
    if "found_in" in attrs:
        return f"the `{attrs.get('listing_key')}` listing's value shown by the search"
    return "a list, which may be empty"


def _fill(template: Any, context: dict[str, Any], where: tuple[str, str]) -> Any:
    if isinstance(template, str):
        try:
            return template.format_map(context)
        except (KeyError, IndexError) as exc:
            raise _fail(*where, "template", f"{template!r} names an unknown placeholder {exc}; allowed: "
                                            f"{sorted(context)}") from None
    if isinstance(template, list):
        return [_fill(t, context, where) for t in template]
    if isinstance(template, dict):
        return {k: _fill(v, context, where) for k, v in template.items()}
    return template


def _mutation(fam: Family, site: Site, values: dict[str, Any]) -> dict[str, Any]:
    a, mech = site.attrs, fam.mechanism
    if mech == "rename_field":
        return {"renamed_fields": {a["field"]: values["new_name"]}}
    if mech in ("require_arg", "require_item_field"):
        spec: dict[str, Any] = {"tool": a["tool"], "name": values["name"],
                                "type": "list[str]" if a.get("empty_list") else "str"}
        if mech == "require_item_field":
            spec["item_of"] = str(a["field"]).removesuffix("[]")
        for key in ("same_as", "ask_user", "listing_key"):
            if key in a:
                spec[key] = a[key]
        if "found_in" in a:
            spec["found_in"] = _resolve_tool(a["found_in"], site.domain, a, (fam.name, site.id, "found_in"))
        return {"required_args": [spec]}
    if mech == "arg_format":
        return {"arg_formats": {f"{a['tool']}|{a['type']}": values["format"]}}
    if mech == "set_flag":
        value = values["value"]
        return {a["flag"]: [value] if a.get("as_list") else value}
    if mech == "booking_fee":
        return {"booking_fees": {values["name"]: values["amount"]}}
    return {"terms": {a["field"]: values["value"]}}  # term_notice


def build(fam: Family, site: Site, values: dict[str, Any]) -> Instance:
    """The instance of `fam` at `site` with `values` (one per parameter): a pure function of them."""
    a = site.attrs
    applies_to = tuple(a.get("applies_to") or ((site.domain,) if site.domain in GOAL_DOMAINS else GOAL_DOMAINS))
    write = _resolve_tool("write", site.domain, a, (fam.name, site.id, "tool")) if len(applies_to) == 1 else a["tool"]
    name = str(values.get("name", a.get("field", "")))
    context = {**{k: v for k, v in a.items() if isinstance(v, (str, int))}, **values, "domain": site.domain,
               "tool": a["tool"], "write": write, "words": words(str(a.get("field", name)) if fam.mechanism ==
                                                                  "term_notice" else name),
               "shown": _shown(site, values), "source": _source(a), "field": a.get("field", "*")}
    where = (fam.name, f"{site.domain}/{site.id}")
    templates = {k: a.get(k, fam.templates.get(k)) for k in TEMPLATE_KEYS}
    ev = _fill(templates["evidence"], context, where) or {}
    adaptation = templates["adaptation"]
    if adaptation is not None:
        tool = _resolve_tool(str(adaptation.get("tool", "write")), site.domain, a, (*where, "adaptation"))
        adaptation = (tool, tuple(_fill(list(adaptation.get("args_include") or []), context, where)))
    domain_tools = tuple(t for t in TOOL_NAMES if t.split(".")[0] == site.domain)
    trigger = domain_tools + (tuple(GOAL_WRITE_TOOLS.values()) if site.domain == "payment" else ())
    if a.get("trigger") == "write":  # before the booking only: a search would show the new value first
        trigger = (write,)
    notices = None
    if fam.mechanism == "term_notice":
        notices = {lang: text.format(shown=context["shown"]) for lang, text in a["notice"].items()}
    user_pays = templates["user_pays"]
    return Instance(
        id=instance_id(fam.name, site.domain, site.id, values, fam.params), family=fam.name, kind=fam.kind,
        domain=site.domain, site=site.id, tool=a["tool"], field=str(a.get("field", "*")), values=dict(values),
        applies_to=applies_to, trigger=trigger, mutation=_mutation(fam, site, values),
        evidence={k: tuple(str(x) for x in ev.get(k, ())) for k in ("error_codes", "fields", "tokens")},
        adaptation=adaptation, description=_fill(templates["description"], context, where),
        why=_fill(templates["why"], context, where), requires=tuple(a.get("requires") or ()),
        user_pays=None if user_pays is None else _fill(user_pays, context, where), notices=notices,
        notice_token=context["shown"] if notices else None,
        user_args=((name, USER_FACTS[a["ask_user"]]),) if "ask_user" in a else (),
    )


# --- docs -----------------------------------------------------------------------------------------------------

FAMILIES_DOC = "docs/design.md"  # where `python -m cells families --docs` writes the block `drift:families`


def _where(fam: Family) -> str:
    by_domain: dict[str, list[str]] = {}
    for site in fam.sites:
        by_domain.setdefault(site.domain, []).append(f"`{site.id}`")
    return "; ".join(f"{domain}: {', '.join(ids)}" for domain, ids in by_domain.items())


def families_markdown() -> str:
    """Every family as declared: what it changes, where, how many instances, the evidence and adaptation its
    instances derive, what the user pays. The docs' table of drift families (`python -m cells families --docs`)."""
    rows = ["| family | kind | what it changes | sites (domain: site) | instances | evidence, adaptation | "
            "the user pays |", "|---|---|---|---|---|---|---|"]
    for fam in load_families().values():
        t = fam.templates
        ev = t["evidence"] or {}
        evidence = ", ".join(f"{k} {list(v)}" for k, v in ev.items() if v) or "-"
        adaptation = "a message citing a token" if t["adaptation"] is None else (
            f"a successful `{t['adaptation'].get('tool', 'write')}` call with {t['adaptation'].get('args_include') or []}")
        pays = "per site" if fam.mechanism == "term_notice" else (t["user_pays"] or "-")
        rows.append(f"| `{fam.name}` | {fam.kind} | {fam.what} | {_where(fam)} | "
                    f"{sum(s.count() for s in fam.sites)} | {evidence}; {adaptation} | {pays} |")
    total = sum(s.count() for fam in load_families().values() for s in fam.sites)
    return "\n".join(rows) + f"\n\n{total} distinct instances in all."
