"""Localisation: spoken forms of cities, places, dates, times and money in the user's language,
plus script detection used to score whether a reply is in the user's script.

Canonical values (IATA codes, place ids like "BLR:KORAMANGALA", ISO dates) never change; only the
words spoken around them do. Every rendered string is NFC-normalised.
"""

from __future__ import annotations

import re
import unicodedata
from datetime import date, datetime
from typing import Any

from cells.errors import DriftCallError
from cells.step_03_data import load_fixture
from cells.step_04_datatypes import LANGUAGES

I18N_FIXTURE = "i18n.yaml"

# The script a user of each language writes in (Hinglish is romanised Hindi).
LANGUAGE_SCRIPT: dict[str, str] = {
    "hi": "devanagari", "ta": "tamil", "kn": "kannada", "en": "latin", "hinglish": "latin",
}

# Unicode blocks of the scripts we score (the reward's letter shares read them too).
SCRIPT_RANGES: tuple[tuple[str, int, int], ...] = (
    ("devanagari", 0x0900, 0x097F),
    ("tamil", 0x0B80, 0x0BFF),
    ("kannada", 0x0C80, 0x0CFF),
)
DOMINANT_SHARE = 0.6  # a script must hold this share of the letters to name the text's script


class I18nError(DriftCallError, ValueError):
    """A localisation table lacks an entry; the message names the key and language."""


def nfc(text: str) -> str:
    return unicodedata.normalize("NFC", text)


_SENTENCE_START = re.compile(r"(^|[.!?;]\s+)([a-z])")


def finish(text: str, lang: str) -> str:
    """NFC-normalise; in Latin-script languages also capitalise sentence starts (a slot value such
    as "egg wala khana" may open a sentence)."""
    if LANGUAGE_SCRIPT.get(lang) == "latin":
        text = _SENTENCE_START.sub(lambda m: m.group(1) + m.group(2).upper(), text)
    return nfc(text)


def _char_script(ch: str) -> str | None:
    code = ord(ch)
    for name, lo, hi in SCRIPT_RANGES:
        if lo <= code <= hi:
            return name
    if ch.isascii() and ch.isalpha():
        return "latin"
    if ch.isalpha() and unicodedata.name(ch, "").startswith("LATIN"):
        return "latin"
    return None


# The same classification as `_char_script`, done by the regex engine (the reward scores every
# user-facing message, and a per-character Python loop was a tenth of the env's time).
_RANGE_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple(
    (name, re.compile(f"[{chr(lo)}-{chr(hi)}]")) for name, lo, hi in SCRIPT_RANGES)
_ASCII_LETTERS = re.compile("[A-Za-z]")
_OTHER_NON_ASCII = re.compile("[^\x00-\x7f" + "".join(f"{chr(lo)}-{chr(hi)}" for _, lo, hi in SCRIPT_RANGES) + "]")


def script_counts(text: str) -> dict[str, int]:
    """Letters (and combining signs) per script; digits, punctuation, ₹ and spaces are ignored."""
    text = nfc(text)
    counts: dict[str, int] = {}
    for name, pattern in _RANGE_PATTERNS:
        if n := len(pattern.findall(text)):
            counts[name] = n
    latin = len(_ASCII_LETTERS.findall(text))
    latin += sum(_char_script(ch) == "latin" for ch in _OTHER_NON_ASCII.findall(text))
    if latin:
        counts["latin"] = latin
    return counts


def script_share(text: str, script: str) -> float:
    """Share of `text`'s letters (as `script_counts` counts them) in `script`; 0.0 for text without letters."""
    counts = script_counts(text)
    total = sum(counts.values())
    return counts.get(script, 0) / total if total else 0.0


def script_of(text: str) -> str:
    """"devanagari" | "tamil" | "kannada" | "latin" | "mixed".

    The script holding at least `DOMINANT_SHARE` of the letters names the text; text with no
    letters at all (e.g. "₹4,500") or no dominant script is "mixed".
    """
    counts = script_counts(text)
    total = sum(counts.values())
    if total == 0:
        return "mixed"
    script, top = max(sorted(counts.items()), key=lambda kv: kv[1])
    return script if top / total >= DOMINANT_SHARE else "mixed"


def has_script(text: str, script: str) -> bool:
    return script_counts(text).get(script, 0) > 0


# ---------------------------------------------------------------------------------------------
# Tables
# ---------------------------------------------------------------------------------------------


def tables() -> dict[str, Any]:
    """The parsed i18n fixture (cached by step_03; treat as read-only)."""
    return load_fixture(I18N_FIXTURE)


def phrases() -> dict[str, Any]:
    return tables()["phrases"]


def _by_lang(entry: Any, lang: str, where: str) -> Any:
    if not isinstance(entry, dict) or lang not in entry:
        raise I18nError(f"{I18N_FIXTURE}: {where} has no entry for language {lang!r}")
    return entry[lang]


def city_codes() -> tuple[str, ...]:
    return tuple(sorted(tables()["cities"]))


def city_name(iata: str) -> str:
    """Canonical city name, e.g. "BLR" -> "Bengaluru"."""
    return str(tables()["cities"][iata]["name"])


def city_form(iata: str, lang: str, case: str = "name") -> str:
    """Spoken city name; `case` in name|from|to|in (only Tamil and Kannada inflect)."""
    cities = tables()["cities"]
    if iata not in cities:
        raise I18nError(f"{I18N_FIXTURE}: unknown city {iata!r}; known: {sorted(cities)}")
    form = _by_lang(cities[iata]["forms"], lang, f"cities.{iata}.forms")
    if isinstance(form, dict):
        return str(form.get(case, form["name"]))
    return str(form)


def places(iata: str) -> tuple[str, ...]:
    """Canonical place ids of a city, airport first: ("BLR:AIRPORT", "BLR:KORAMANGALA", ...)."""
    return (f"{iata}:AIRPORT", *(f"{iata}:{p}" for p in sorted(tables()["cities"][iata]["places"])))


def place_name(place_id: str, lang: str) -> str:
    """Spoken name of a canonical place id (the airport is just "airport" in the city's context)."""
    iata, _, place = place_id.partition(":")
    if place == "AIRPORT":
        return str(_by_lang(phrases()["airport"], lang, "phrases.airport"))
    entry = tables()["cities"][iata]["places"].get(place)
    if entry is None:
        raise I18nError(f"{I18N_FIXTURE}: unknown place {place_id!r}")
    return str(_by_lang(entry, lang, f"cities.{iata}.places.{place}"))


def spoken_date(iso: str, lang: str) -> str:
    """"2026-05-02" -> "2 मई" / "மே 2" / "ಮೇ 2" / "2 May"."""
    d = date.fromisoformat(iso[:10])
    month = _by_lang(phrases()["months"], lang, "phrases.months")[d.month - 1]
    return _by_lang(phrases()["date"], lang, "phrases.date").format(d=d.day, month=month)


def _period_index(hour: int) -> int:
    if 4 <= hour <= 11:
        return 0
    if 12 <= hour <= 15:
        return 1
    if 16 <= hour <= 19:
        return 2
    return 3


def spoken_time(hhmm: str, lang: str) -> str:
    """"07:30" -> "सुबह 7:30 बजे" / "காலை 7:30 மணி" / "ಬೆಳಿಗ್ಗೆ 7:30 ಗಂಟೆ" / "7:30 am"."""
    hour, minute = (int(x) for x in hhmm[:5].split(":"))
    h12 = hour % 12 or 12
    clock = f"{h12}" if minute == 0 else f"{h12}:{minute:02d}"
    periods = _by_lang(phrases()["periods"], lang, "phrases.periods")
    period = ("am" if hour < 12 else "pm") if lang == "en" else periods[_period_index(hour)]
    return _by_lang(phrases()["time"], lang, "phrases.time").format(period=period, clock=clock)


def money(inr: int) -> str:
    """Integer INR with Indian digit grouping: 125000 -> "₹1,25,000"."""
    digits = str(abs(int(inr)))
    if len(digits) > 3:
        head, tail = digits[:-3], digits[-3:]
        groups: list[str] = []
        while len(head) > 2:
            groups.insert(0, head[-2:])
            head = head[:-2]
        if head:
            groups.insert(0, head)
        digits = ",".join([*groups, tail])
    return f"{'-' if inr < 0 else ''}₹{digits}"


# How users write rupees around a number, in the five languages: before it (₹, Rs, INR, रु, ரூ, ರೂ) or after it
# (rupees, रुपये, ரூபாய், ರೂಪಾಯಿ, the Indian "/-"). Matched case-insensitively; `money` renders the first.
CURRENCY_BEFORE: tuple[str, ...] = ("₹", "rs.", "rs", "inr", "रु.", "रु", "ரூ.", "ரூ", "ರೂ.", "ರೂ")
CURRENCY_AFTER: tuple[str, ...] = (
    "rupees", "rupee", "rupaye", "rupaiye", "rupay", "inr", "/-", "रुपये", "रुपए", "रुपया", "ரூபாய்", "ರೂಪಾಯಿ")
# A run of digits (any script's: `\d` matches ०-९, ௦-௯, ೦-೯), commas and paise; `_GROUPED` says which runs are
# numbers as users group them: Indian (1,25,000), western (125,000) or plain (125000), optional paise (.00).
_DIGIT_RUN = re.compile(r"\d(?:[\d,]*\d)?(?:\.\d+)?")
_GROUPED = re.compile(r"(?:\d{1,3}(?:,\d{2})*,\d{3}|\d{1,3}(?:,\d{3})+|\d+)(?:\.\d{1,2})?")
_MARKERS = tuple(dict.fromkeys(CURRENCY_BEFORE + CURRENCY_AFTER))
_BEFORE_REACH = max(map(len, CURRENCY_BEFORE))
_AFTER_REACH = max(map(len, CURRENCY_AFTER)) + 2  # one space, the marker, the character after it


def _digits_value(digits: str) -> int:
    return int("".join(str(unicodedata.digit(ch)) for ch in digits))


def _marked(text: str, start: int, end: int) -> bool:
    """Whether a currency marker sits right before `text[start:end]` or right after it. A marker made of letters
    must be a word of its own ("prs 300" is no price); a symbol (₹, /-) may touch anything."""
    stop = start - 1 if start and text[start - 1] == " " else start
    before = text[max(0, stop - _BEFORE_REACH):stop].casefold()
    # the tuple forms test every marker in one C call: most digit runs (dates, times, ids) have none
    if before.endswith(CURRENCY_BEFORE):
        for marker in CURRENCY_BEFORE:
            if before.endswith(marker):
                at = stop - len(marker)  # where the marker starts in `text`
                if not marker[0].isalpha() or at == 0 or not text[at - 1].isalpha():
                    return True
    after = text[end:end + _AFTER_REACH].casefold()
    after = after[1:] if after.startswith(" ") else after  # one space between number and marker
    if after.startswith(CURRENCY_AFTER):
        for marker in CURRENCY_AFTER:
            if after.startswith(marker):
                rest = after[len(marker):]
                if not marker[-1].isalpha() or not rest or not rest[0].isalpha():
                    return True
    return False


def amounts_in(text: str) -> tuple[int | float, ...]:
    """Every rupee amount `text` states, in order: "₹1,25,000", "Rs. 4300", "INR 4,300.00", "4300 रुपये",
    "₹४,३००", "500/-". A number without a currency marker is not money (a date, a seat count, an OTP); paise that
    are not zero make a float (never equal to an integer total)."""
    text = nfc(text)
    folded = text.casefold()
    if not any(marker in folded for marker in _MARKERS):  # most texts name no rupees: skip the digit scan
        return ()
    out: list[int | float] = []
    for m in _DIGIT_RUN.finditer(text):
        run = m.group(0)
        if not _GROUPED.fullmatch(run) or not _marked(text, m.start(), m.end()):
            continue
        whole, _, paise = run.partition(".")
        value = _digits_value(whole.replace(",", ""))
        out.append(value + _digits_value(paise) / 10 ** len(paise) if paise and _digits_value(paise) else value)
    return tuple(out)


def counted(kind: str, n: int, lang: str) -> str:
    """"tickets"/"rooms" with the right singular/plural form."""
    one, many = _by_lang(phrases()[kind], lang, f"phrases.{kind}")
    return (one if n == 1 else many).format(n=n)


def vocab(table: str, key: str, lang: str) -> str:
    """A localised enum value: vocab("vehicles", "suv", "hi") -> "एसयूवी"."""
    entry = phrases()[table].get(key)
    if entry is None:
        raise I18nError(f"{I18N_FIXTURE}: phrases.{table} has no {key!r}")
    return str(_by_lang(entry, lang, f"phrases.{table}.{key}"))


def rating_text(value: float) -> str:
    return f"{value:g}"


def join_names(names: tuple[str, ...] | list[str], lang: str) -> str:
    """"A, B और C" in the user's language."""
    names = list(names)
    if len(names) <= 1:
        return "".join(names)
    word = _by_lang(phrases()["and"], lang, "phrases.and")
    return f"{', '.join(names[:-1])} {word} {names[-1]}"


def iso_now(dt: datetime) -> str:
    """ISO 8601 with the IST offset, e.g. "2026-05-02T09:15:00+05:30"."""
    return dt.strftime("%Y-%m-%dT%H:%M:%S") + "+05:30"


def check_languages(entry: dict[str, Any], where: str) -> None:
    """Raise unless `entry` has a value for every language."""
    missing = [lang for lang in LANGUAGES if lang not in entry]
    if missing:
        raise I18nError(f"{where}: missing language(s) {missing}")
