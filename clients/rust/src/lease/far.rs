//! A server far away, as a lease object sees it: the lease call's round trip, how long a lease
//! stays usable once its answer is in, and the rate new callers come at.
//!
//! A lease granted with `LEASE ms` can hand out permits only from the moment its answer comes
//! back until its end: `ms` after the call was sent, or (with
//! [`LeaseConfig::synced_within`](super::LeaseConfig::synced_within)) the server's `now + ms`
//! less the clocks' bound. When the round trip is over a quarter of `ms`, one lease call at a
//! time leaves the key without a live lease for a round trip at every renewal, and its callers
//! wait. Far, the object instead keeps lease calls going out one after the other, each sent so
//! that its answer comes before the last live lease runs out (several in flight), and asks each
//! for the permits its callers take while it is usable. Refused, it sends its next lease call a
//! round trip before the refusal's retry time, so that the call reaches Redis as the room frees
//! and its answer comes back as the refusal ends. Within a lease's time of a refusal, callers
//! that find no live lease are refused from memory until the next lease call's answer is due,
//! rather than waiting up to a round trip for it (never admitting more than waiting would).

use std::time::{Duration, Instant};

/// Lease calls in flight at most.
pub(super) const MAX_ROUNDS: usize = 8;

#[derive(Default)]
pub(super) struct Far {
    /// The lease calls' round trip, averaged, and its mean deviation.
    rtt: Option<Duration>,
    rttvar: Duration,
    /// How long a granted lease was usable once its answer came, averaged.
    usable: Option<Duration>,
    /// New callers per ms, averaged over periods of a quarter of the lease.
    rate: f64,
    /// The current period's start and its callers.
    from: Option<Instant>,
    asked: u64,
}

/// The round trip and a lease's usable time, far.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Reach {
    pub(super) rtt: Duration,
    pub(super) usable: Duration,
}

impl Far {
    /// One new caller at `now` (not one back from a wait); a period ends after a quarter of a
    /// lease of `ms`.
    pub(super) fn arrived(&mut self, now: Instant, ms: u64) {
        let Some(from) = self.from else {
            self.from = Some(now);
            return;
        };
        self.asked += 1;
        let took = now.saturating_duration_since(from);
        if took >= Duration::from_millis((ms / 4).max(1)) {
            let sample = self.asked as f64 / (took.as_secs_f64() * 1e3);
            self.rate = match self.rate {
                0.0 => sample,
                rate => 0.75 * rate + 0.25 * sample,
            };
            self.from = Some(now);
            self.asked = 0;
        }
    }

    /// A lease call answered `took` after it was sent.
    pub(super) fn round_trip(&mut self, took: Duration) {
        self.rtt = Some(match self.rtt {
            None => took,
            Some(rtt) => {
                let off = rtt.abs_diff(took);
                self.rttvar = (self.rttvar * 3 + off) / 4;
                (rtt * 7 + took) / 8
            }
        });
    }

    /// A granted lease usable for `usable` once its answer came.
    pub(super) fn granted(&mut self, usable: Duration) {
        self.usable = Some(match self.usable {
            None => usable,
            Some(u) => (u * 3 + usable) / 4,
        });
    }

    /// The reach, when the round trip is over a quarter of a lease of `ms` and leases have
    /// been usable.
    pub(super) fn far(&self, ms: u64) -> Option<Reach> {
        let lease = Duration::from_millis(ms);
        let rtt = self.rtt.filter(|&rtt| rtt * 4 > lease)?;
        let usable = self.usable.filter(|u| !u.is_zero())?;
        Some(Reach { rtt, usable })
    }

    /// How long before the last live lease runs out the next lease call is sent, far: the
    /// round trip, and twice its deviation or a quarter of the usable time (at least 1 ms),
    /// whichever is more, at most half the usable time; at most 2 ms short of the round trip
    /// and the usable time.
    pub(super) fn lead(&self, reach: Reach) -> Duration {
        let spare = (self.rttvar * 2)
            .max(reach.usable / 4)
            .max(Duration::from_millis(1))
            .min(reach.usable / 2);
        let most = (reach.rtt + reach.usable).saturating_sub(Duration::from_millis(2));
        (reach.rtt + spare).min(most)
    }

    /// When a lease call sent at `sent` runs out, expected.
    pub(super) fn ends(reach: Reach, sent: Instant) -> Instant {
        sent + reach.rtt + reach.usable
    }

    /// Permits for a far lease: what new callers take in one and a half times the time
    /// between lease calls (the round trip and the usable time less the lead, or the round trip
    /// over [`MAX_ROUNDS`] if more), at most in the usable time; within 1 and `max`.
    pub(super) fn size(&self, reach: Reach, max: u64) -> u64 {
        let between = (reach.rtt + reach.usable).saturating_sub(self.lead(reach));
        let between = between.max(reach.rtt / MAX_ROUNDS as u32) * 3 / 2;
        let span = between.min(reach.usable);
        let want = (self.rate * span.as_secs_f64() * 1e3).ceil();
        if want >= max as f64 {
            max
        } else {
            (want as u64).max(1)
        }
    }

    /// Whether callers come at under half of `size` per lease of `ms` (a far key's lease then
    /// ends unused for want of traffic, not for the leases' overlap).
    pub(super) fn quiet(&self, size: u64, ms: u64) -> bool {
        self.rate * ms as f64 * 2.0 < size as f64
    }

    /// When `left` permits run out at this rate, or at `deadline` if sooner.
    pub(super) fn runs_out(&self, left: u64, deadline: Instant, now: Instant) -> Instant {
        if self.rate <= 0.0 {
            return deadline;
        }
        let ms = left as f64 / self.rate;
        if ms >= deadline.saturating_duration_since(now).as_secs_f64() * 1e3 {
            return deadline;
        }
        now + Duration::from_secs_f64(ms / 1e3)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn far_is_a_round_trip_over_a_quarter_of_a_lease_once_one_was_usable() {
        let mut f = Far::default();
        assert_eq!(f.far(100), None);
        f.round_trip(ms(20));
        f.granted(ms(80));
        assert_eq!(f.far(100), None);
        f.round_trip(ms(180));
        assert_eq!(
            f.far(100),
            Some(Reach {
                rtt: ms(40),
                usable: ms(80)
            })
        );
        let mut f = Far::default();
        f.round_trip(ms(80));
        assert_eq!(f.far(100), None, "no lease usable yet");
        f.granted(ms(20));
        assert_eq!(f.far(100).map(|r| r.usable), Some(ms(20)));
    }

    #[test]
    fn the_rate_is_callers_per_ms_over_quarter_leases() {
        let mut f = Far::default();
        let t = Instant::now();
        for i in 0..=25 {
            f.arrived(t + ms(i), 100);
        }
        assert!((f.rate - 1.0).abs() < 0.1, "{}", f.rate);
        let reach = Reach {
            rtt: ms(80),
            usable: ms(20),
        };
        // Lead 85 ms: a lease call every 15 ms, 22.5 ms of callers a lease, 20 ms usable.
        assert_eq!(f.size(reach, 50), 20);
        assert_eq!(f.size(reach, 10), 10);
        assert_eq!(Far::default().size(reach, 50), 1);
        let long = Reach {
            rtt: ms(80),
            usable: ms(60),
        };
        // Lead 95 ms: every 45 ms, 60 ms usable.
        assert_eq!(f.size(long, 100), 60);
        assert!(!f.quiet(100, 100) && f.quiet(201, 100));
    }

    #[test]
    fn the_lead_is_the_round_trip_and_its_spare() {
        let mut f = Far::default();
        let reach = |rtt, usable| Reach {
            rtt: ms(rtt),
            usable: ms(usable),
        };
        assert_eq!(
            f.lead(reach(80, 20)),
            ms(85),
            "a quarter of the usable time"
        );
        assert_eq!(f.lead(reach(80, 2)), ms(80), "2 ms short of the end");
        f.round_trip(ms(80));
        f.round_trip(ms(120));
        assert_eq!(f.rttvar, ms(10));
        assert_eq!(
            f.lead(reach(80, 20)),
            ms(90),
            "half the usable time at most"
        );
        assert_eq!(f.lead(reach(60, 60)), ms(80), "twice the deviation");
        let t = Instant::now();
        assert_eq!(Far::ends(reach(80, 20), t), t + ms(100));
    }

    #[test]
    fn a_lease_runs_out_at_its_rate_or_its_deadline() {
        let mut f = Far::default();
        let t = Instant::now();
        assert_eq!(f.runs_out(5, t + ms(20), t), t + ms(20));
        f.rate = 1.0;
        assert_eq!(f.runs_out(5, t + ms(20), t), t + ms(5));
        assert_eq!(f.runs_out(50, t + ms(20), t), t + ms(20));
    }
}
