//! Delayed writes (RocksDB's delayed write rate): while a keyspace's background work falls
//! behind — the layout reports [`Pressure::Slowdown`](crate::layout::Pressure) or the
//! immutable memtables wait for a flush — each write group is delayed so that the writers
//! together go no faster than a rate, instead of sleeping a fixed time per write or stopping.
//!
//! The rate starts at 4/5 of the rate writers reached just before (measured here, over
//! windows of at least [`WINDOW`]; [`FIRST_RATE`] before any; at most 5/4 of the rate the
//! last slowdown ended at, if that was less than [`REMEMBER`] ago), falls by 4/5 at each step
//! the pressure grows and rises by 5/4 at each step it eases, never above where it started.
//! Without pressure writes are not delayed at all. A write's delay is its bytes at that rate,
//! added to a schedule, so small writes are delayed together in sleeps of at least
//! [`MIN_SLEEP`] (the writer's timer would round a shorter one up and lose rate) and at most
//! [`MAX_SLEEP`]. A layout's stop trigger still stops writers.
//!
//! The controller is a pure function of (time, bytes, grade), driven by the write path under
//! the WAL lock; the tests drive it with made-up clocks.

use std::time::{Duration, Instant};

/// Shortest span over which the writers' rate is measured.
const WINDOW: Duration = Duration::from_millis(100);
/// Shortest sleep: delays below it accumulate in the schedule.
pub(super) const MIN_SLEEP: Duration = Duration::from_millis(1);
/// Longest sleep of one write group: a large batch at a low rate owes seconds, and the sleep
/// holds the WAL lock that `Db::flush` and a close take too. What is left over stays owed,
/// so the write groups after it wait for it.
pub(super) const MAX_SLEEP: Duration = Duration::from_millis(50);
/// Lowest delayed rate, bytes per second (RocksDB's floor is 16 KB/s; a write of 1 KiB then
/// waits about 1 ms at worst).
const MIN_RATE: f64 = 1024.0 * 1024.0;
/// How long the rate a slowdown ended at is remembered for the next one.
const REMEMBER: Duration = Duration::from_secs(2);
/// Rate used when nothing has been measured yet (a slowdown at the first writes after open).
const FIRST_RATE: f64 = 16.0 * 1024.0 * 1024.0;

/// The state of delayed writes of one database.
#[derive(Debug)]
pub(super) struct WriteDelay {
    /// Bytes per second allowed while delayed; 0 when writes are not delayed.
    rate: f64,
    /// The rate the current slowdown started with: the ceiling of `rate`.
    start_rate: f64,
    /// The pressure grade the rate was last set for.
    grade: u32,
    /// When the writes delayed so far are paid for.
    paid_until: Instant,
    /// The measuring window: its start and the bytes written in it.
    window: (Instant, u64),
    /// The writers' rate in the last complete window, bytes per second (0: none yet).
    recent_rate: f64,
    /// When the last slowdown ended and the rate it had then.
    ended: Option<(Instant, f64)>,
}

impl WriteDelay {
    pub(super) fn new(now: Instant) -> Self {
        WriteDelay {
            rate: 0.0,
            start_rate: 0.0,
            grade: 0,
            paid_until: now,
            window: (now, 0),
            recent_rate: 0.0,
            ended: None,
        }
    }

    /// Accounts a write group of `bytes` at `now` under pressure `grade` (`None`: no pressure;
    /// `Some(g)`: `g` steps past the point where slowing starts) and returns how long the
    /// group must wait before it is written (zero, or [`MIN_SLEEP`] to [`MAX_SLEEP`]).
    pub(super) fn delay(&mut self, now: Instant, bytes: u64, grade: Option<u32>) -> Duration {
        self.measure(now, bytes);
        let Some(g) = grade else {
            if self.rate > 0.0 {
                self.ended = Some((now, self.rate));
            }
            self.rate = 0.0;
            self.grade = 0;
            return Duration::ZERO;
        };
        if self.rate == 0.0 {
            let measured = if self.recent_rate > 0.0 {
                (self.recent_rate * 0.8).max(MIN_RATE)
            } else {
                FIRST_RATE
            };
            // A slowdown soon after the last one resumes near the rate that one ended at: the
            // burst between them says little about what the background can take.
            self.start_rate = match self.ended {
                Some((at, rate)) if now.saturating_duration_since(at) < REMEMBER => {
                    measured.min(rate * 1.25)
                }
                _ => measured,
            };
            self.rate = self.start_rate;
            self.grade = 0;
            self.paid_until = now;
        }
        if g > self.grade {
            self.rate = (self.rate * 0.8f64.powi(step(g - self.grade))).max(MIN_RATE);
        } else if g < self.grade {
            self.rate = (self.rate * 1.25f64.powi(step(self.grade - g))).min(self.start_rate);
        }
        self.grade = g;
        // Up to one MIN_SLEEP of the past counts as paid: the writers' own time between
        // writes is part of the rate, not an addition to it.
        let credit = now.checked_sub(MIN_SLEEP).unwrap_or(now);
        self.paid_until =
            self.paid_until.max(credit) + Duration::from_secs_f64(bytes as f64 / self.rate);
        let wait = self.paid_until.saturating_duration_since(now);
        if wait >= MIN_SLEEP {
            wait.min(MAX_SLEEP)
        } else {
            Duration::ZERO
        }
    }

    /// The delayed rate in bytes per second, 0 when writes are not delayed.
    #[cfg(test)]
    pub(super) fn rate(&self) -> f64 {
        self.rate
    }

    fn measure(&mut self, now: Instant, bytes: u64) {
        let (start, seen) = self.window;
        let span = now.saturating_duration_since(start);
        if span >= WINDOW {
            self.recent_rate = seen as f64 / span.as_secs_f64();
            self.window = (now, bytes);
        } else {
            self.window.1 = seen + bytes;
        }
    }
}

fn step(n: u32) -> i32 {
    i32::try_from(n.min(64)).unwrap_or(64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `per_ms` bytes every millisecond for `ms` milliseconds from `t`, under `grade`;
    /// returns the time after the last write and the total delay.
    fn drive(
        d: &mut WriteDelay,
        mut t: Instant,
        ms: u64,
        per_ms: u64,
        grade: Option<u32>,
    ) -> (Instant, Duration) {
        let mut waited = Duration::ZERO;
        for _ in 0..ms {
            let w = d.delay(t, per_ms, grade);
            waited += w;
            t += w + Duration::from_millis(1);
        }
        (t, waited)
    }

    #[test]
    fn no_pressure_no_delay() {
        let t = Instant::now();
        let mut d = WriteDelay::new(t);
        let (_, waited) = drive(&mut d, t, 1000, 100_000, None);
        assert_eq!(waited, Duration::ZERO);
        assert_eq!(d.rate(), 0.0);
    }

    #[test]
    fn slowdown_starts_below_the_measured_rate_and_holds_the_writers_to_it() {
        let t = Instant::now();
        let mut d = WriteDelay::new(t);
        // 100 MB/s for a second, then pressure.
        let (t, _) = drive(&mut d, t, 1000, 100_000, None);
        let (t2, waited) = drive(&mut d, t, 1000, 100_000, Some(0));
        let rate = d.rate();
        assert!((rate - 80e6).abs() < 1e6, "rate {rate}");
        // 100 MB offered at 80 MB/s: the writes took about 1.25 s, 0.25 s of it waiting.
        let took = t2.duration_since(t).as_secs_f64();
        assert!((took - 1.25).abs() < 0.02, "took {took}");
        assert!(
            (waited.as_secs_f64() - 0.25).abs() < 0.02,
            "waited {waited:?}"
        );
    }

    #[test]
    fn the_rate_falls_as_pressure_grows_and_recovers_no_higher_than_it_started() {
        let t = Instant::now();
        let mut d = WriteDelay::new(t);
        let (t, _) = drive(&mut d, t, 1000, 100_000, None);
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(0));
        let start = d.rate();
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(2));
        assert!((d.rate() - start * 0.64).abs() < 1.0);
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(1));
        assert!((d.rate() - start * 0.8).abs() < 1.0);
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(0));
        assert!((d.rate() - start).abs() < 1.0);
        // Easing further never raises it past the start.
        d.grade = 3;
        let _ = drive(&mut d, t, 10, 100_000, Some(0));
        assert!((d.rate() - start).abs() < 1.0);
        let _ = d.delay(t, 1, None);
        assert_eq!(d.rate(), 0.0);
    }

    #[test]
    fn a_slowdown_soon_after_another_resumes_near_its_rate() {
        let t = Instant::now();
        let mut d = WriteDelay::new(t);
        let (t, _) = drive(&mut d, t, 1000, 100_000, None);
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(0));
        let (t, _) = drive(&mut d, t, 10, 100_000, Some(4));
        let low = d.rate();
        assert!((low - 80e6 * 0.8f64.powi(4)).abs() < 1e3, "{low}");
        // A burst at full speed, then pressure again within REMEMBER: 5/4 of where it was.
        let (t, _) = drive(&mut d, t, 500, 100_000, None);
        let (t, _) = drive(&mut d, t, 1, 100_000, Some(0));
        assert!((d.rate() - low * 1.25).abs() < 1e3, "{}", d.rate());
        // Long after: from the measured rate again.
        let (t, _) = drive(&mut d, t, 1, 100_000, None);
        let (t, _) = drive(&mut d, t, 3000, 100_000, None);
        let _ = drive(&mut d, t, 1, 100_000, Some(0));
        assert!((d.rate() - 80e6).abs() < 1e6, "{}", d.rate());
    }

    #[test]
    fn small_writes_sleep_together_and_the_floor_bounds_one_writes_delay() {
        let t = Instant::now();
        let mut d = WriteDelay::new(t);
        // A slowdown with nothing measured starts at FIRST_RATE; 100-byte writes at 16 MiB/s
        // owe 6 µs each: most return at once, and the 60 ms they owe together are slept in
        // sleeps of about 1 ms.
        let mut sleeps = 0;
        let mut now = t;
        for _ in 0..10_000 {
            let w = d.delay(now, 100, Some(0));
            if w > Duration::ZERO {
                assert!(w >= MIN_SLEEP);
                sleeps += 1;
                now += w;
            }
        }
        assert!((50..=62).contains(&sleeps), "{sleeps} sleeps");
        // Deepest pressure: the rate stops at the floor.
        let _ = d.delay(now, 100, Some(200));
        assert_eq!(d.rate(), MIN_RATE);
        // A 1 MiB batch there owes a second: it waits MAX_SLEEP, and so does the next write,
        // until the second is paid.
        let now = now + Duration::from_secs(10);
        assert_eq!(d.delay(now, 1 << 20, Some(200)), MAX_SLEEP);
        let mut t = now + MAX_SLEEP;
        let mut waits = 0;
        loop {
            let w = d.delay(t, 1, Some(200));
            if w.is_zero() {
                break;
            }
            assert!(w <= MAX_SLEEP);
            t += w;
            waits += 1;
        }
        let paid = t.duration_since(now).as_secs_f64();
        assert!((0.99..=1.01).contains(&paid), "{paid} s, {waits} waits");
    }
}
