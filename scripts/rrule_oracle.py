#!/usr/bin/env python3
"""Independent oracle for Toki's recurring schedules.

Writes tests/data/rrule_oracle.json (relative to the repository root) from the
fixed CORPUS below. Re-run with:

    python3 scripts/rrule_oracle.py

Needs Python 3.11+, python-dateutil and the system tz database (zoneinfo).
The output is deterministic for a given tz database (the version used is
printed in the summary; it is not written to the JSON).

How an expected list is computed
--------------------------------
1. The RRULE is expanded by dateutil on NAIVE local date-times (wall-clock
   times, which is what RFC 5545 means for a DTSTART with a TZID). DTSTART
   must be synchronized with the rule (be its first occurrence); the script
   checks that.
2. UNTIL. dateutil refuses an aware (UTC) UNTIL with a naive DTSTART, and
   converting UNTIL to a naive local time is wrong around DST changes. So the
   UNTIL part is removed from the rule before dateutil sees it, the rule is
   expanded up to a horizon (two days past the later of UNTIL and the window
   end, in naive time: offsets are within +-14 h, so no occurrence that can
   map to an instant <= that bound is missed), and every produced UTC instant
   is kept only if instant <= UNTIL (RFC 5545 3.3.10: UNTIL is inclusive and,
   for a TZID'd DTSTART, a UTC instant). This is applied per instant, after
   the DST policy: with `both`, the second instant of an ambiguous time can
   fall after UNTIL while the first is still included.
3. COUNT is left to dateutil: it counts rule occurrences (naive local times)
   from DTSTART, before EXDATE and before the DST policy. So an occurrence
   removed by EXDATE or dropped by `skip` is NOT replaced by a later one, and
   a window that starts after DTSTART does not restart the count. (RFC 5545
   allows COUNT and UNTIL together in no rule; the corpus never does it.)
4. EXDATEs are naive local date-times compared with the naive occurrences
   (so an EXDATE on an ambiguous time removes both instants under `both`, and
   an EXDATE on a non-existent time removes that occurrence).
5. Each remaining naive time is mapped to UTC with zoneinfo:
   - a time that does not exist (gap, spring forward):
       shift_forward: interpret it with the UTC offset in force BEFORE the gap
                      (RFC 5545 3.3.5), i.e. 02:30 in New York on 2026-03-08
                      -> 02:30-05:00 = 07:30Z = 03:30 EDT. With zoneinfo that
                      is fold=0; the script checks it by computing both
                      candidate offsets and asserting that fold=0 gives the
                      one whose round trip lands LATER than the wall time.
       skip:          dropped.
   - a time that exists twice (overlap, fall back):
       first: fold=0 (the earlier instant, RFC 5545 default), asserted;
       last:  fold=1 (the later instant);
       both:  both instants.
   Gaps and overlaps are detected by round-tripping through UTC: a time that
   does not come back unchanged from UTC is in a gap; a time whose fold=0 and
   fold=1 offsets differ (and which does round-trip) is in an overlap.
6. The instants are filtered to the window [from, to), de-duplicated, sorted
   and written as RFC 3339 UTC strings with seconds precision and a `Z`.

Each case also lists `local` (the naive occurrences, after EXDATE, that give
at least one expected instant under some policy) and `dst` (every occurrence
of the rule, after UNTIL/COUNT, in a gap or overlap whose candidate instants
touch the window, with its candidate instants and whether an EXDATE removed
it).
"""

from __future__ import annotations

import json
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path
from zoneinfo import ZoneInfo

from dateutil.rrule import rrulestr

UTC = timezone.utc
DEFAULT_FROM = "2026-01-01T00:00:00Z"
DEFAULT_TO = "2028-01-01T00:00:00Z"
GAP_POLICIES = ("shift_forward", "skip")
OVERLAP_POLICIES = ("first", "last", "both")
OUT = Path(__file__).resolve().parent.parent / "tests" / "data" / "rrule_oracle.json"

NY, LON, SYD, TYO = "America/New_York", "Europe/London", "Australia/Sydney", "Asia/Tokyo"
SCL, HAV, LHW = "America/Santiago", "America/Havana", "Australia/Lord_Howe"

# DST changes in the corpus years (local wall clock):
#   New York: gap 02:00-03:00 on 2026-03-08 and 2027-03-14, overlap 01:00-02:00 on 2026-11-01 and 2027-11-07
#   London:   gap 01:00-02:00 on 2026-03-29 and 2027-03-28, overlap 01:00-02:00 on 2026-10-25 and 2027-10-31
#   Sydney:   overlap 02:00-03:00 on 2026-04-05 and 2027-04-04, gap 02:00-03:00 on 2026-10-04 and 2027-10-03
#   Tokyo:    no DST
#   Santiago: gap 00:00-01:00 on 2026-09-06, overlap 23:00-24:00 on 2026-04-04; Havana: gap 00:00-01:00 on 2026-03-08,
#             overlap 00:00-01:00 on 2026-11-01; Lord Howe: 30-minute gap 02:00-02:30 on 2026-10-04, overlap 01:30-02:00 on 2026-04-05
# Keys: name, tz, dtstart (local, no offset), rrule (no "RRULE:" prefix; UNTIL in UTC with Z),
# optional ex (EXDATEs, local), frm/to (window, UTC; default 2026-01-01 .. 2028-01-01), note.
CORPUS = [
    # ---- America/New_York: DST ----
    dict(name="ny-daily-0230-spring", tz=NY, dtstart="2026-03-05T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 does not exist on 2026-03-08 (gap)"),
    dict(name="ny-daily-0230-fall", tz=NY, dtstart="2026-10-29T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 exists once on 2026-11-01 (control)"),
    dict(name="ny-daily-0130-fall", tz=NY, dtstart="2026-10-29T01:30:00", rrule="FREQ=DAILY;COUNT=7", note="01:30 exists twice on 2026-11-01 (overlap)"),
    dict(name="ny-daily-0130-spring", tz=NY, dtstart="2026-03-05T01:30:00", rrule="FREQ=DAILY;COUNT=7", note="01:30 exists on 2026-03-08 (control), UTC moves next day"),
    dict(name="ny-daily-0230-since-2020-window-spring-2027", tz=NY, dtstart="2020-01-01T02:30:00", rrule="FREQ=DAILY", frm="2027-03-12T00:00:00Z", to="2027-03-17T00:00:00Z", note="old DTSTART, narrow window over the 2027-03-14 gap"),
    dict(name="ny-daily-0130-since-2020-window-fall-2027", tz=NY, dtstart="2020-01-01T01:30:00", rrule="FREQ=DAILY", frm="2027-11-05T00:00:00Z", to="2027-11-10T00:00:00Z", note="old DTSTART, narrow window over the 2027-11-07 overlap"),
    dict(name="ny-weekly-0130-sun-fall", tz=NY, dtstart="2026-10-18T01:30:00", rrule="FREQ=WEEKLY;BYDAY=SU;COUNT=6", note="weekly 01:30 across fall-back (overlap on 2026-11-01)"),
    dict(name="ny-weekly-0900-tue-both", tz=NY, dtstart="2026-02-03T09:00:00", rrule="FREQ=WEEKLY;BYDAY=TU;UNTIL=20261215T000000Z", note="no ambiguity; UTC instant moves 14:00Z -> 13:00Z -> 14:00Z"),
    dict(name="ny-weekly-0600-sun-bull", tz=NY, dtstart="2026-02-22T06:00:00", rrule="FREQ=WEEKLY;BYDAY=SU;UNTIL=20261130T000000Z", note="Bull bug: 06:00 on the change days runs exactly once"),
    dict(name="ny-weekly-0600-mon-bull", tz=NY, dtstart="2026-10-19T06:00:00", rrule="FREQ=WEEKLY;BYDAY=MO;COUNT=5", note="Bull bug: Monday after fall-back runs once, at 11:00Z"),
    dict(name="ny-daily-0600-fall-bull", tz=NY, dtstart="2026-10-30T06:00:00", rrule="FREQ=DAILY;COUNT=5", note="daily 06:00 across fall-back: no duplicate"),
    dict(name="ny-dtstart-in-gap", tz=NY, dtstart="2026-03-08T02:30:00", rrule="FREQ=DAILY;COUNT=4", note="DTSTART itself does not exist"),
    dict(name="ny-dtstart-in-overlap", tz=NY, dtstart="2026-11-01T01:30:00", rrule="FREQ=WEEKLY;COUNT=3", note="DTSTART itself is ambiguous"),
    dict(name="ny-exdate-on-gap", tz=NY, dtstart="2026-03-05T02:30:00", rrule="FREQ=DAILY;COUNT=7", ex=["2026-03-08T02:30:00", "2026-03-10T02:30:00"], note="EXDATE on the non-existent occurrence"),
    dict(name="ny-exdate-on-overlap", tz=NY, dtstart="2026-10-29T01:30:00", rrule="FREQ=DAILY;COUNT=7", ex=["2026-11-01T01:30:00"], note="EXDATE on the ambiguous occurrence removes both instants"),
    dict(name="ny-until-inside-overlap", tz=NY, dtstart="2026-10-29T01:30:00", rrule="FREQ=DAILY;UNTIL=20261101T053000Z", note="UNTIL = first instant of 11-01 01:30; the second (06:30Z) is after UNTIL"),
    dict(name="ny-until-before-shifted-gap", tz=NY, dtstart="2026-03-05T02:30:00", rrule="FREQ=DAILY;UNTIL=20260308T070000Z", note="03-08 02:30 shifts to 07:30Z > UNTIL: excluded"),
    dict(name="ny-until-dst-offset-trap", tz=NY, dtstart="2026-02-24T09:00:00", rrule="FREQ=WEEKLY;BYDAY=TU;UNTIL=20260317T130000Z", note="03-17 09:00 EDT = 13:00Z = UNTIL: included"),
    dict(name="ny-yearly-mar-2su-0230", tz=NY, dtstart="2026-03-08T02:30:00", rrule="FREQ=YEARLY;BYMONTH=3;BYDAY=2SU", note="lands in the gap every year"),
    dict(name="ny-yearly-nov-1su-0130", tz=NY, dtstart="2026-11-01T01:30:00", rrule="FREQ=YEARLY;BYMONTH=11;BYDAY=1SU", note="lands in the overlap every year"),
    dict(name="ny-daily-interval3-0230-spring", tz=NY, dtstart="2026-03-02T02:30:00", rrule="FREQ=DAILY;INTERVAL=3;COUNT=6", note="INTERVAL=3 hits the gap on 03-08"),
    dict(name="ny-monthly-2mo", tz=NY, dtstart="2026-01-12T10:00:00", rrule="FREQ=MONTHLY;BYDAY=2MO", note="second Monday"),
    dict(name="ny-monthly-last-fri", tz=NY, dtstart="2026-01-30T17:00:00", rrule="FREQ=MONTHLY;BYDAY=-1FR", note="last Friday"),
    dict(name="ny-monthly-29th", tz=NY, dtstart="2026-01-29T09:00:00", rrule="FREQ=MONTHLY;BYMONTHDAY=29;COUNT=26", to="2028-04-01T00:00:00Z", note="February skipped except 2028-02-29"),
    dict(name="ny-monthly-last-day", tz=NY, dtstart="2026-01-31T18:00:00", rrule="FREQ=MONTHLY;BYMONTHDAY=-1", note="BYMONTHDAY=-1"),
    dict(name="ny-yearly-quarterly-bymonth", tz=NY, dtstart="2026-01-01T09:00:00", rrule="FREQ=YEARLY;BYMONTH=1,4,7,10;BYMONTHDAY=1", note="BYMONTH with YEARLY"),
    dict(name="ny-monthly-interval2-1st-15th", tz=NY, dtstart="2026-01-01T08:00:00", rrule="FREQ=MONTHLY;INTERVAL=2;BYMONTHDAY=1,15", note="INTERVAL=2 with two month days"),
    # ---- Europe/London: DST ----
    dict(name="lon-daily-0130-spring", tz=LON, dtstart="2026-03-26T01:30:00", rrule="FREQ=DAILY;COUNT=7", note="01:30 does not exist on 2026-03-29 (gap)"),
    dict(name="lon-daily-0130-fall", tz=LON, dtstart="2026-10-22T01:30:00", rrule="FREQ=DAILY;COUNT=7", note="01:30 exists twice on 2026-10-25 (overlap)"),
    dict(name="lon-daily-0230-spring", tz=LON, dtstart="2026-03-26T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 exists on 2026-03-29 (control)"),
    dict(name="lon-daily-0230-fall", tz=LON, dtstart="2026-10-22T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 exists once on 2026-10-25 (control)"),
    dict(name="lon-weekly-0130-sun", tz=LON, dtstart="2026-03-15T01:30:00", rrule="FREQ=WEEKLY;BYDAY=SU;UNTIL=20261110T000000Z", note="gap on 03-29 and overlap on 10-25"),
    dict(name="lon-weekly-0900-tue-thu", tz=LON, dtstart="2026-01-06T09:00:00", rrule="FREQ=WEEKLY;BYDAY=TU,TH;UNTIL=20261231T235959Z", note="no ambiguity; UTC moves 09:00Z -> 08:00Z -> 09:00Z"),
    dict(name="lon-yearly-last-sun-mar-0130", tz=LON, dtstart="2026-03-29T01:30:00", rrule="FREQ=YEARLY;BYMONTH=3;BYDAY=-1SU", note="lands in the gap every year"),
    dict(name="lon-yearly-last-sun-oct-0130", tz=LON, dtstart="2026-10-25T01:30:00", rrule="FREQ=YEARLY;BYMONTH=10;BYDAY=-1SU", note="lands in the overlap every year"),
    dict(name="lon-daily-interval2-0130-fall", tz=LON, dtstart="2026-10-21T01:30:00", rrule="FREQ=DAILY;INTERVAL=2;COUNT=5", note="INTERVAL=2 hits the overlap on 10-25"),
    dict(name="lon-exdate-on-overlap-and-gap", tz=LON, dtstart="2026-03-15T01:30:00", rrule="FREQ=WEEKLY;BYDAY=SU;UNTIL=20261110T000000Z", ex=["2026-03-29T01:30:00", "2026-10-25T01:30:00"], note="EXDATEs on both DST-affected occurrences"),
    # ---- Australia/Sydney: DST (southern hemisphere) ----
    dict(name="syd-daily-0230-april", tz=SYD, dtstart="2026-04-02T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 exists twice on 2026-04-05 (overlap)"),
    dict(name="syd-daily-0230-october", tz=SYD, dtstart="2026-10-01T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="02:30 does not exist on 2026-10-04 (gap)"),
    dict(name="syd-weekly-0230-sun", tz=SYD, dtstart="2026-03-22T02:30:00", rrule="FREQ=WEEKLY;BYDAY=SU;UNTIL=20261020T000000Z", note="overlap on 04-05 and gap on 10-04"),
    dict(name="syd-weekly-0900-tue-both", tz=SYD, dtstart="2026-03-03T09:00:00", rrule="FREQ=WEEKLY;BYDAY=TU;UNTIL=20261110T000000Z", note="no ambiguity; UTC moves 22:00Z -> 23:00Z -> 22:00Z (previous day)"),
    dict(name="syd-exdate-on-gap", tz=SYD, dtstart="2026-10-01T02:30:00", rrule="FREQ=DAILY;COUNT=7", ex=["2026-10-04T02:30:00"], note="EXDATE on the non-existent occurrence"),
    dict(name="syd-until-date-line", tz=SYD, dtstart="2026-01-05T09:00:00", rrule="FREQ=DAILY;UNTIL=20260110T000000Z", note="01-10 09:00 AEDT = 01-09 22:00Z <= UNTIL: included"),
    dict(name="syd-daily-0230-since-2025-window-2027", tz=SYD, dtstart="2025-06-01T02:30:00", rrule="FREQ=DAILY", frm="2027-04-02T00:00:00Z", to="2027-04-06T00:00:00Z", note="narrow window over the 2027-04-04 overlap"),
    # ---- Asia/Tokyo: no DST ----
    dict(name="tyo-daily-0230-spring", tz=TYO, dtstart="2026-03-05T02:30:00", rrule="FREQ=DAILY;COUNT=7", note="no DST: instants 17:30Z every day"),
    dict(name="tyo-weekly-0130-sun-fall", tz=TYO, dtstart="2026-10-18T01:30:00", rrule="FREQ=WEEKLY;BYDAY=SU;COUNT=6", note="no DST: no overlap"),
    dict(name="tyo-weekly-0900-tue", tz=TYO, dtstart="2026-03-03T09:00:00", rrule="FREQ=WEEKLY;BYDAY=TU;UNTIL=20261110T000000Z", note="no DST: always 00:00Z"),
    dict(name="tyo-until-trap", tz=TYO, dtstart="2026-01-05T08:00:00", rrule="FREQ=DAILY;UNTIL=20260110T000000Z", note="01-10 08:00 JST = 01-09 23:00Z <= UNTIL: included"),
    # ---- zones whose clocks change at midnight or by 30 minutes ----
    dict(name="scl-daily-0030-september", tz=SCL, dtstart="2026-09-03T00:30:00", rrule="FREQ=DAILY;COUNT=6", note="Santiago: 00:00-01:00 does not exist on 2026-09-06 (midnight itself is missing)"),
    dict(name="scl-daily-2330-april", tz=SCL, dtstart="2026-04-01T23:30:00", rrule="FREQ=DAILY;COUNT=6", note="Santiago: 23:00-24:00 exists twice on 2026-04-04"),
    dict(name="hav-daily-0030-spring", tz=HAV, dtstart="2026-03-05T00:30:00", rrule="FREQ=DAILY;COUNT=6", note="Havana: 00:00-01:00 does not exist on 2026-03-08"),
    dict(name="hav-daily-0030-fall", tz=HAV, dtstart="2026-10-29T00:30:00", rrule="FREQ=DAILY;COUNT=6", note="Havana: 00:00-01:00 exists twice on 2026-11-01 (midnight is ambiguous)"),
    dict(name="lhw-daily-0215-october", tz=LHW, dtstart="2026-10-01T02:15:00", rrule="FREQ=DAILY;COUNT=6", note="Lord Howe: 30-minute gap 02:00-02:30 on 2026-10-04"),
    dict(name="lhw-daily-0145-april", tz=LHW, dtstart="2026-04-02T01:45:00", rrule="FREQ=DAILY;COUNT=6", note="Lord Howe: 30-minute overlap 01:30-02:00 on 2026-04-05"),
    # ---- calendar arithmetic (UTC unless noted) ----
    dict(name="utc-yearly-feb29", tz="UTC", dtstart="2024-02-29T12:00:00", rrule="FREQ=YEARLY;BYMONTH=2;BYMONTHDAY=29", frm="2024-01-01T00:00:00Z", to="2033-01-01T00:00:00Z", note="leap days only: 2024, 2028, 2032"),
    dict(name="utc-monthly-31st", tz="UTC", dtstart="2026-01-31T08:00:00", rrule="FREQ=MONTHLY;BYMONTHDAY=31", note="months without a 31st are skipped"),
    dict(name="utc-monthly-implicit-31st", tz="UTC", dtstart="2026-01-31T08:00:00", rrule="FREQ=MONTHLY;COUNT=10", note="day taken from DTSTART; months without a 31st are skipped"),
    dict(name="utc-monthly-mo-tu", tz="UTC", dtstart="2026-01-05T07:00:00", rrule="FREQ=MONTHLY;BYDAY=MO,TU;COUNT=20", note="every Monday and Tuesday (no BYSETPOS)"),
    dict(name="utc-monthly-interval3", tz="UTC", dtstart="2026-01-15T12:00:00", rrule="FREQ=MONTHLY;INTERVAL=3;BYMONTHDAY=15", note="INTERVAL=3"),
    dict(name="utc-weekly-interval2-tu-th", tz="UTC", dtstart="2026-01-06T09:00:00", rrule="FREQ=WEEKLY;INTERVAL=2;BYDAY=TU,TH;COUNT=10", note="INTERVAL=2, two days"),
    dict(name="utc-weekly-mo-we-fr", tz="UTC", dtstart="2026-01-05T10:00:00", rrule="FREQ=WEEKLY;BYDAY=MO,WE,FR;COUNT=15", note="several BYDAY, WKST default"),
    dict(name="utc-weekly-wkst-default", tz="UTC", dtstart="2026-01-06T09:00:00", rrule="FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU", note="RFC 5545 WKST example, default WKST=MO"),
    dict(name="utc-weekly-wkst-su", tz="UTC", dtstart="2026-01-06T09:00:00", rrule="FREQ=WEEKLY;INTERVAL=2;COUNT=4;BYDAY=TU,SU;WKST=SU", note="same with WKST=SU: different days"),
    dict(name="utc-daily-count-exdate", tz="UTC", dtstart="2026-06-01T00:00:00", rrule="FREQ=DAILY;COUNT=10", ex=["2026-06-03T00:00:00", "2026-06-07T00:00:00"], note="COUNT is applied before EXDATE: 8 left"),
    dict(name="utc-count-started-before-window", tz="UTC", dtstart="2025-12-20T06:00:00", rrule="FREQ=DAILY;COUNT=20", note="COUNT counts from DTSTART, not from the window"),
    dict(name="utc-count-ends-before-window", tz="UTC", dtstart="2025-12-01T06:00:00", rrule="FREQ=DAILY;COUNT=5", note="nothing in the window"),
    dict(name="utc-yearly-plain", tz="UTC", dtstart="2026-03-15T15:45:00", rrule="FREQ=YEARLY", note="no end"),
    dict(name="utc-until-inclusive", tz="UTC", dtstart="2026-01-02T17:00:00", rrule="FREQ=WEEKLY;BYDAY=FR;UNTIL=20260227T170000Z", note="UNTIL equal to an occurrence is included"),
    dict(name="utc-window-edges", tz="UTC", dtstart="2025-12-31T00:00:00", rrule="FREQ=DAILY", frm="2026-01-01T00:00:00Z", to="2026-01-04T00:00:00Z", note="window is [from, to): 01-01 in, 01-04 out"),
]


def parse_local(s: str) -> datetime:
    d = datetime.fromisoformat(s)
    assert d.tzinfo is None, f"expected a local date-time without offset: {s}"
    return d


def parse_utc(s: str) -> datetime:
    assert s.endswith("Z"), f"expected a UTC date-time ending in Z: {s}"
    return datetime.fromisoformat(s[:-1]).replace(tzinfo=UTC)


def fmt_utc(d: datetime) -> str:
    return d.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def fmt_local(d: datetime) -> str:
    return d.strftime("%Y-%m-%dT%H:%M:%S")


def split_until(rule: str) -> tuple[str, datetime | None]:
    """Remove UNTIL from the rule (dateutil gets the rest); return it as an aware UTC datetime."""
    parts, until = [], None
    for part in rule.split(";"):
        key, _, value = part.partition("=")
        if key.upper() == "UNTIL":
            assert value.endswith("Z") and len(value) == 16, f"UNTIL must be YYYYMMDDTHHMMSSZ: {value}"
            until = datetime.strptime(value, "%Y%m%dT%H%M%SZ").replace(tzinfo=UTC)
        else:
            parts.append(part)
    if until is not None:
        assert "COUNT=" not in rule.upper(), "COUNT and UNTIL together are not allowed by RFC 5545"
    return ";".join(parts), until


def resolve(naive: datetime, tz: ZoneInfo) -> tuple[str, list[datetime]]:
    """Classify a wall-clock time and return (kind, candidate instants in UTC).

    kind is "normal" (one instant), "gap" ([shift_forward instant]) or
    "overlap" ([first, last]). Detection is by round trip through UTC.
    """
    cands = []
    for fold in (0, 1):
        aware = naive.replace(tzinfo=tz, fold=fold)
        u = aware.astimezone(UTC)
        back = u.astimezone(tz).replace(tzinfo=None)
        cands.append((u, back))
    (u0, b0), (u1, b1) = cands
    if b0 != naive or b1 != naive:
        # Non-existent: at least one fold does not come back. The two folds use
        # the offsets on either side of the gap; "shift forward" is the one
        # interpreted with the offset before the gap, i.e. the one that comes
        # back LATER than the wall time. Check that zoneinfo's fold=0 is it.
        assert b0 != naive and b1 != naive, f"half round trip for {naive} in {tz}"
        forward = max(cands, key=lambda c: c[1])
        assert forward[0] == u0 and b0 > naive, f"fold=0 is not shift-forward for {naive} in {tz}"
        return "gap", [u0]
    if u0 != u1:
        assert u0 < u1, f"fold=0 is not the earlier instant for {naive} in {tz}"
        return "overlap", [u0, u1]
    return "normal", [u0]


def instants_for(kind: str, cands: list[datetime], gap: str, overlap: str) -> list[datetime]:
    if kind == "gap":
        return cands if gap == "shift_forward" else []
    if kind == "overlap":
        return {"first": cands[:1], "last": cands[1:], "both": cands}[overlap]
    return cands


def expand_case(case: dict) -> dict:
    tz = ZoneInfo(case["tz"])
    dtstart = parse_local(case["dtstart"])
    exdates = sorted(parse_local(s) for s in case.get("ex", []))
    frm = parse_utc(case.get("frm", DEFAULT_FROM))
    to = parse_utc(case.get("to", DEFAULT_TO))
    rule_wo_until, until = split_until(case["rrule"])

    # Horizon in naive local time: no occurrence beyond it can map to an
    # instant < to (or <= UNTIL), since UTC offsets are within +-14 h.
    bound = to if until is None else min(to, until)
    horizon = bound.replace(tzinfo=None) + timedelta(days=2)

    rule = rrulestr(rule_wo_until, dtstart=dtstart)
    naive_occ = []
    for occ in rule:
        if occ > horizon:
            break
        naive_occ.append(occ)
    # dateutil only yields DTSTART when it matches the rule; RFC 5545 leaves an
    # unsynchronized DTSTART undefined, so the corpus must not have one.
    assert naive_occ and naive_occ[0] == dtstart, f"{case['name']}: DTSTART is not the first occurrence"

    combos = [(g, o) for g in GAP_POLICIES for o in OVERLAP_POLICIES]
    expected = {f"{g},{o}": set() for g, o in combos}
    local_used, dst = set(), []
    exset = set(exdates)
    for occ in naive_occ:
        kind, cands = resolve(occ, tz)
        in_until = [u for u in cands if until is None or u <= until]
        if kind != "normal" and in_until and any(frm <= u < to for u in in_until):
            entry = {"local": fmt_local(occ), "kind": kind}
            if kind == "gap":
                entry["shift_forward"] = fmt_utc(cands[0])
            else:
                entry["first"], entry["last"] = fmt_utc(cands[0]), fmt_utc(cands[1])
            if occ in exset:
                entry["excluded_by_exdate"] = True
            dst.append(entry)
        if occ in exset:
            continue
        for g, o in combos:
            for u in instants_for(kind, cands, g, o):
                if (until is None or u <= until) and frm <= u < to:
                    expected[f"{g},{o}"].add(u)
                    local_used.add(occ)

    return {
        "name": case["name"],
        "note": case.get("note", ""),
        "time_zone": case["tz"],
        "dtstart": fmt_local(dtstart),
        "rrule": case["rrule"],
        "exdates": [fmt_local(d) for d in exdates],
        "from": fmt_utc(frm),
        "to": fmt_utc(to),
        "expected": {k: [fmt_utc(u) for u in sorted(v)] for k, v in expected.items()},
        "local": [fmt_local(d) for d in sorted(local_used)],
        "dst": dst,
    }


def tzdata_version() -> str:
    try:
        with open("/usr/share/zoneinfo/tzdata.zi", encoding="utf-8") as f:
            return f.readline().strip().removeprefix("# version ")
    except OSError:
        return "unknown"


def main() -> int:
    names = [c["name"] for c in CORPUS]
    assert len(names) == len(set(names)), "duplicate case names"
    cases = [expand_case(c) for c in CORPUS]
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(cases, indent=2) + "\n", encoding="utf-8")

    per_policy = {k: sum(len(c["expected"][k]) for c in cases) for k in cases[0]["expected"]}
    gaps = sum(1 for c in cases for d in c["dst"] if d["kind"] == "gap")
    overlaps = sum(1 for c in cases for d in c["dst"] if d["kind"] == "overlap")
    excluded = sum(1 for c in cases for d in c["dst"] if d.get("excluded_by_exdate"))
    with_dst = sum(1 for c in cases if c["dst"])
    zones = sorted({c["time_zone"] for c in cases})
    print(f"wrote {OUT}")
    print(f"tz database {tzdata_version()}; {len(cases)} cases in {len(zones)} zones ({', '.join(zones)})")
    print(f"local occurrences: {sum(len(c['local']) for c in cases)}")
    print("instants per policy: " + ", ".join(f"{k}={v}" for k, v in per_policy.items()))
    print(f"DST-affected occurrences: {gaps} in a gap, {overlaps} in an overlap ({excluded} of them removed by EXDATE), in {with_dst} cases")
    empty = [c["name"] for c in cases if not c["expected"]["shift_forward,first"]]
    if empty:
        print(f"cases with no occurrence in the window: {', '.join(empty)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
