//! Crowded instants. Before it can send a tenant's reminders, the daemon
//! opens that tenant's database to read and claim them: a few milliseconds
//! a tenant, whatever the number of reminders. When thousands of tenants
//! have reminders due at one instant (09:00 on a Monday), the fixed lead is
//! too short for all of those opens, and the last tenants are claimed after
//! their instant. So each further tenant enqueued for an instant has its
//! messages made visible a little earlier than the one before, in waves of
//! [`WAVE`] tenants ([`crate::settings::PipelineSettings::lead_at`]): the
//! claims of a crowded instant are spread ahead of it, wave after wave, and
//! the first tenants keep the plain lead.
//!
//! A process remembers the tenants it enqueued for each instant still to
//! come; the places are its own (the scanner's and the registrar's direct
//! path share one in a process). What it holds is bounded: instants are
//! forgotten once past, a crowd is counted but not remembered past the
//! place that reaches the longest lead, and past [`MAX_INSTANTS`] a new
//! instant gets the plain lead.

use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

use toki_model::domain::{DueAt, Instant, TenantId};

/// Instants remembered at once; a new one past it gets place 0.
pub const MAX_INSTANTS: usize = 4096;

/// Tenants made visible together: the daemon's workers receive them in
/// full batches ([`crate::settings::PipelineSettings::lead_at`]).
pub const WAVE: u32 = 64;

/// A tenant's place among those enqueued for one instant (0: the first).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default)]
pub struct Place(pub u32);

/// The tenants enqueued for one instant: their places, up to `remembered`
/// of them; the others are only counted.
#[derive(Debug, Default)]
struct Crowd {
    places: HashMap<TenantId, Place>,
    counted: u32,
}

/// The places of the tenants enqueued for each instant still to come.
#[derive(Debug, Default)]
pub struct Crowds {
    instants: Mutex<BTreeMap<DueAt, Crowd>>,
}

impl Crowds {
    /// `tenant`'s place among the tenants enqueued for `due`: the same
    /// tenant keeps its place; `remembered` places are kept per instant
    /// (those past it all reach the longest lead, see
    /// [`crate::settings::PipelineSettings::remembered_places`]).
    /// Instants before `now` are forgotten.
    pub fn place(&self, due: DueAt, tenant: &TenantId, now: Instant, remembered: u32) -> Place {
        let mut instants = self.instants.lock().unwrap_or_else(|e| e.into_inner());
        if instants.first_key_value().is_some_and(|(d, _)| d.0 < now) {
            *instants = instants.split_off(&DueAt(now));
        }
        if !instants.contains_key(&due) && instants.len() >= MAX_INSTANTS {
            return Place::default();
        }
        let crowd = instants.entry(due).or_default();
        if let Some(place) = crowd.places.get(tenant) {
            return *place;
        }
        let place = Place(crowd.counted);
        crowd.counted = crowd.counted.saturating_add(1);
        if place.0 < remembered {
            crowd.places.insert(tenant.clone(), place);
        }
        place
    }

    /// Instants remembered now (for tests of the bound).
    #[cfg(test)]
    fn instants(&self) -> usize {
        self.instants.lock().unwrap().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::{Duration, TimeZone, Utc};

    fn at(s: i64) -> Instant {
        Utc.with_ymd_and_hms(2026, 12, 7, 9, 0, 0).unwrap() + Duration::seconds(s)
    }

    fn tenant(i: usize) -> TenantId {
        format!("t{i}").parse().unwrap()
    }

    #[test]
    fn tenants_take_places_in_turn_and_keep_them() {
        let crowds = Crowds::default();
        let (due, now) = (DueAt(at(0)), at(-600));
        let places: Vec<_> = (0..3)
            .map(|i| crowds.place(due, &tenant(i), now, 100))
            .collect();
        assert_eq!(places, [Place(0), Place(1), Place(2)]);
        assert_eq!(crowds.place(due, &tenant(1), now, 100), Place(1));
        // Another instant is another crowd.
        assert_eq!(crowds.place(DueAt(at(60)), &tenant(2), now, 100), Place(0));
    }

    #[test]
    fn past_the_remembered_places_tenants_are_counted_only() {
        let crowds = Crowds::default();
        let (due, now) = (DueAt(at(0)), at(-600));
        for i in 0..5 {
            crowds.place(due, &tenant(i), now, 2);
        }
        // Not remembered: asked again, it is counted again (and stays past the bound).
        assert_eq!(crowds.place(due, &tenant(4), now, 2), Place(5));
        assert_eq!(crowds.place(due, &tenant(0), now, 2), Place(0));
        let kept = crowds.instants.lock().unwrap()[&due].places.len();
        assert_eq!(kept, 2);
    }

    #[test]
    fn past_instants_are_forgotten_and_new_ones_are_bounded() {
        let crowds = Crowds::default();
        for s in 0..MAX_INSTANTS as i64 {
            crowds.place(DueAt(at(s)), &tenant(0), at(-1), 10);
        }
        assert_eq!(crowds.instants(), MAX_INSTANTS);
        // One more instant, while all are to come: the plain lead, nothing kept.
        let late = DueAt(at(MAX_INSTANTS as i64));
        crowds.place(late, &tenant(0), at(-1), 10);
        assert_eq!(crowds.place(late, &tenant(1), at(-1), 10), Place(0));
        assert_eq!(crowds.instants(), MAX_INSTANTS);
        // Half of them past: forgotten, and the new instant is kept.
        let now = at(MAX_INSTANTS as i64 / 2);
        assert_eq!(crowds.place(late, &tenant(1), now, 10), Place(0));
        assert_eq!(crowds.place(late, &tenant(2), now, 10), Place(1));
        assert_eq!(crowds.instants(), MAX_INSTANTS / 2 + 1);
    }

    /// Past the places a crowd remembers, every tenant has the longest
    /// lead; the last remembered wave does not (so it must be remembered).
    #[test]
    fn the_places_not_remembered_all_have_the_longest_lead() {
        let settings = crate::settings::PipelineSettings::default();
        let remembered = settings.remembered_places();
        assert_eq!(remembered % WAVE, 0);
        assert_eq!(settings.lead_at(Place(remembered)), settings.max_lead);
        assert_eq!(settings.lead_at(Place(u32::MAX)), settings.max_lead);
        assert!(settings.lead_at(Place(remembered - WAVE)) < settings.max_lead);
        assert_eq!(settings.lead_at(Place(WAVE - 1)), settings.lead);
    }
}
