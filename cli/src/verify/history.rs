//! What a `verify` contest records, and the checker that reads it
//! afterwards: every event of every worker (one JSON line each, times in
//! µs of the host's wall clock, which every worker of one host shares) and
//! the controller's faults, judged for double grants at the lock and at the
//! counter, lost updates, overruns, tokens that went down, hand-off latency
//! and recovery after a killed holder.

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// One thing that happened, as a worker or the controller records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    /// A holder was granted `key` with fencing `token`; its lease is
    /// certainly valid until `valid_until` (as the holder computed it).
    Acquired {
        at: u64,
        holder: String,
        key: String,
        token: u64,
        valid_until: u64,
    },
    /// The holder read the counter of `key` under `token` (`value`), or was
    /// refused (`value` none: a newer token has been seen).
    Read {
        at: u64,
        holder: String,
        key: String,
        token: u64,
        value: Option<u64>,
    },
    /// The holder wrote `value` to the counter of `key` under `token` and
    /// the store `accepted` it or refused it; `valid_until` is what the
    /// holder believed of its lease just before sending it.
    Wrote {
        at: u64,
        holder: String,
        key: String,
        token: u64,
        value: u64,
        accepted: bool,
        valid_until: u64,
    },
    /// The holder gave the lock back (`lost`: it learned the lease was lost
    /// first); its lease was certainly valid until `valid_until`.
    Released {
        at: u64,
        holder: String,
        key: String,
        valid_until: u64,
        lost: bool,
    },
    /// A fault began: `what` in words (a worker stopped or killed, a link
    /// blackholed or delayed, a failover).
    Fault { at: u64, what: String },
    /// The controller killed the process of `worker`.
    Killed { at: u64, worker: String },
}

/// What the checker found in a history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Findings {
    /// Holds granted.
    pub holds: usize,
    /// Writes the counter accepted.
    pub writes_accepted: usize,
    /// Writes the counter refused (a stale token).
    pub writes_refused: usize,
    /// A second holder granted a key while another's lease on it was
    /// certainly valid: the lock failed to exclude.
    pub double_grants_at_lock: Vec<String>,
    /// Accepted writes that read the same value of one key: a double grant
    /// that reached the counter (fencing should make this 0).
    pub double_grants_at_counter: Vec<String>,
    /// Keys whose final counter is not the number of accepted writes.
    pub lost_updates: Vec<String>,
    /// Keys whose fencing tokens, in order of grant, did not rise.
    pub tokens_went_down: Vec<String>,
    /// Longest time a holder sent a write after its lease's certain end, µs.
    pub longest_overrun_us: u64,
    /// Hand-off latencies (a release to the next grant of a waiter), µs.
    pub handoff_p50_us: Option<u64>,
    /// The 99th percentile of those.
    pub handoff_p99_us: Option<u64>,
    /// Longest time from a killed holder's kill to its key's next grant, µs.
    pub longest_recovery_us: Option<u64>,
}

impl Findings {
    /// Whether the contest broke a guarantee that fencing must keep: a
    /// double grant that reached the counter, a lost update or a token that
    /// went down.
    pub fn violated(&self) -> bool {
        !self.double_grants_at_counter.is_empty()
            || !self.lost_updates.is_empty()
            || !self.tokens_went_down.is_empty()
    }
}

/// One hold, assembled from its events.
#[derive(Debug)]
struct Hold<'a> {
    holder: &'a str,
    acquired: u64,
    token: u64,
    /// Until when the holder certainly held it: the end of its certain
    /// validity, or its release if earlier.
    until: u64,
}

/// Judges `events`, with `counters` the final value of each key's counter.
pub fn check(events: &[Event], counters: &BTreeMap<String, u64>) -> Findings {
    let mut findings = Findings::default();
    let mut holds: BTreeMap<&str, Vec<Hold<'_>>> = BTreeMap::new();
    let mut accepted: BTreeMap<&str, Vec<(u64, &str)>> = BTreeMap::new();
    for event in events {
        match event {
            Event::Acquired {
                at,
                holder,
                key,
                token,
                valid_until,
            } => {
                findings.holds += 1;
                holds.entry(key).or_default().push(Hold {
                    holder,
                    acquired: *at,
                    token: *token,
                    until: *valid_until,
                });
            }
            Event::Wrote {
                at,
                holder,
                key,
                value,
                accepted: true,
                valid_until,
                ..
            } => {
                findings.writes_accepted += 1;
                accepted.entry(key).or_default().push((*value, holder));
                findings.longest_overrun_us = findings
                    .longest_overrun_us
                    .max(at.saturating_sub(*valid_until));
            }
            Event::Wrote {
                at, valid_until, ..
            } => {
                findings.writes_refused += 1;
                findings.longest_overrun_us = findings
                    .longest_overrun_us
                    .max(at.saturating_sub(*valid_until));
            }
            Event::Released {
                at,
                holder,
                key,
                valid_until,
                ..
            } => {
                if let Some(hold) = holds
                    .get_mut(key.as_str())
                    .and_then(|list| list.iter_mut().rev().find(|hold| hold.holder == holder))
                {
                    hold.until = (*at).min(*valid_until).max(hold.acquired);
                }
            }
            _ => {}
        }
    }
    let mut handoffs = Vec::new();
    for (key, list) in &mut holds {
        list.sort_by_key(|hold| hold.acquired);
        for (i, hold) in list.iter().enumerate() {
            if let Some(earlier) = list[..i]
                .iter()
                .find(|earlier| earlier.holder != hold.holder && earlier.until > hold.acquired)
            {
                findings.double_grants_at_lock.push(format!(
                    "{key}: {} granted at {} while {}'s lease was valid until {}",
                    hold.holder, hold.acquired, earlier.holder, earlier.until
                ));
            }
            if i > 0 {
                let previous = &list[i - 1];
                if hold.token <= previous.token {
                    findings.tokens_went_down.push(format!(
                        "{key}: token {} granted after {}",
                        hold.token, previous.token
                    ));
                }
                if hold.acquired >= previous.until {
                    handoffs.push(hold.acquired - previous.until);
                }
            }
        }
    }
    for (key, writes) in &mut accepted {
        writes.sort_unstable();
        for pair in writes.windows(2) {
            if pair[0].0 == pair[1].0 {
                findings.double_grants_at_counter.push(format!(
                    "{key}: {} and {} both wrote {}",
                    pair[0].1, pair[1].1, pair[0].0
                ));
            }
        }
        let written = u64::try_from(writes.len()).unwrap_or(u64::MAX);
        if counters.get(*key).copied().unwrap_or(0) != written {
            findings.lost_updates.push(format!(
                "{key}: counter {} after {written} accepted writes",
                counters.get(*key).copied().unwrap_or(0)
            ));
        }
    }
    handoffs.sort_unstable();
    findings.handoff_p50_us = percentile(&handoffs, 50);
    findings.handoff_p99_us = percentile(&handoffs, 99);
    findings.longest_recovery_us = recovery(events, &holds);
    findings
}

/// The `p`th percentile of sorted `values`.
fn percentile(values: &[u64], p: usize) -> Option<u64> {
    let last = values.len().checked_sub(1)?;
    values.get(last * p / 100).copied()
}

/// The longest time from a kill to the next grant of a key the killed
/// worker held then.
fn recovery(events: &[Event], holds: &BTreeMap<&str, Vec<Hold<'_>>>) -> Option<u64> {
    let mut longest = None;
    for event in events {
        let Event::Killed { at, worker } = event else {
            continue;
        };
        for list in holds.values() {
            let held = list.iter().any(|hold| {
                hold.holder.starts_with(&format!("{worker}/"))
                    && hold.acquired <= *at
                    && hold.until > *at
            });
            let next = list.iter().find(|hold| hold.acquired > *at);
            if let (true, Some(next)) = (held, next) {
                let took = next.acquired - at;
                longest = Some(longest.map_or(took, |longest: u64| longest.max(took)));
            }
        }
    }
    longest
}

/// Now, in µs of the wall clock: the time of every event of a history.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_micros()).unwrap_or(u64::MAX)
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn acquired(at: u64, holder: &str, token: u64, valid_until: u64) -> Event {
        Event::Acquired {
            at,
            holder: holder.to_owned(),
            key: "k".to_owned(),
            token,
            valid_until,
        }
    }

    fn wrote(at: u64, holder: &str, token: u64, value: u64, accepted: bool) -> Event {
        Event::Wrote {
            at,
            holder: holder.to_owned(),
            key: "k".to_owned(),
            token,
            value,
            accepted,
            valid_until: at + 1000,
        }
    }

    fn released(at: u64, holder: &str, valid_until: u64) -> Event {
        Event::Released {
            at,
            holder: holder.to_owned(),
            key: "k".to_owned(),
            valid_until,
            lost: false,
        }
    }

    fn counters(value: u64) -> BTreeMap<String, u64> {
        BTreeMap::from([("k".to_owned(), value)])
    }

    #[test]
    fn a_clean_history_passes() {
        let events = [
            acquired(0, "w0/0", 1, 1000),
            wrote(10, "w0/0", 1, 1, true),
            released(20, "w0/0", 1000),
            acquired(30, "w1/0", 2, 1000),
            wrote(40, "w1/0", 2, 2, true),
            released(50, "w1/0", 1000),
        ];
        let findings = check(&events, &counters(2));
        assert!(!findings.violated(), "{findings:?}");
        assert!(findings.double_grants_at_lock.is_empty());
        assert_eq!(findings.handoff_p50_us, Some(10));
    }

    #[test]
    fn a_second_grant_inside_a_valid_lease_is_a_double_grant_at_the_lock() {
        let events = [
            acquired(0, "w0/0", 1, 1000),
            acquired(500, "w1/0", 2, 1500),
            released(600, "w1/0", 1500),
            released(700, "w0/0", 1000),
        ];
        let findings = check(&events, &BTreeMap::new());
        assert_eq!(findings.double_grants_at_lock.len(), 1, "{findings:?}");
    }

    #[test]
    fn two_accepted_writes_of_one_value_are_a_double_grant_at_the_counter() {
        let events = [
            acquired(0, "w0/0", 1, 1000),
            acquired(2000, "w1/0", 2, 3000),
            wrote(2100, "w0/0", 1, 1, true),
            wrote(2200, "w1/0", 2, 1, true),
        ];
        let findings = check(&events, &counters(2));
        assert_eq!(findings.double_grants_at_counter.len(), 1, "{findings:?}");
        assert!(findings.violated());
    }

    #[test]
    fn a_counter_behind_its_accepted_writes_is_a_lost_update() {
        let events = [
            acquired(0, "w0/0", 1, 1000),
            wrote(10, "w0/0", 1, 1, true),
            acquired(2000, "w1/0", 2, 3000),
            wrote(2010, "w1/0", 2, 2, true),
        ];
        let findings = check(&events, &counters(1));
        assert_eq!(findings.lost_updates.len(), 1, "{findings:?}");
        assert!(findings.violated());
    }

    #[test]
    fn a_write_after_the_lease_ended_is_an_overrun() {
        let events = [
            acquired(0, "w0/0", 1, 1000),
            Event::Wrote {
                at: 4000,
                holder: "w0/0".to_owned(),
                key: "k".to_owned(),
                token: 1,
                value: 1,
                accepted: false,
                valid_until: 1000,
            },
        ];
        let findings = check(&events, &BTreeMap::new());
        assert_eq!(findings.longest_overrun_us, 3000);
        assert_eq!(findings.writes_refused, 1);
    }

    #[test]
    fn a_token_that_went_down_is_reported() {
        let events = [
            acquired(0, "w0/0", 5, 100),
            released(50, "w0/0", 100),
            acquired(200, "w1/0", 4, 300),
        ];
        let findings = check(&events, &BTreeMap::new());
        assert_eq!(findings.tokens_went_down.len(), 1, "{findings:?}");
        assert!(findings.violated());
    }

    #[test]
    fn recovery_counts_from_the_kill_to_the_next_grant() {
        let events = [
            acquired(0, "w0/0", 1, 5000),
            Event::Killed {
                at: 100,
                worker: "w0".to_owned(),
            },
            acquired(2100, "w1/0", 2, 7000),
        ];
        let findings = check(&events, &BTreeMap::new());
        assert_eq!(findings.longest_recovery_us, Some(2000));
    }
}
