//! The recording's clock: the timestamp counter's calibration as info.json
//! keeps it ([`Clock`]), and the conversion of timestamps to
//! CLOCK_MONOTONIC nanoseconds it gives ([`ClockMap`]).

/// TSC to CLOCK_MONOTONIC calibration.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Clock {
    /// TSC frequency (ticks per second), as measured or reported.
    pub tsc_hz: f64,
    /// `(tsc, monotonic_ns)` pairs read together, in time order (typically
    /// one at the start and one at the end of the recording).
    pub pairs: Vec<(u64, u64)>,
    /// The clock of the pairs' nanoseconds, by uftrace's name (`record
    /// --clock`): `mono_raw`, `boot`; empty for `mono`, CLOCK_MONOTONIC.
    pub name: String,
}

/// Converts TSC values to CLOCK_MONOTONIC nanoseconds (see [`Clock`]).
#[derive(Clone, Copy, Debug)]
pub(crate) enum ClockMap {
    /// Through two pairs: exact integer interpolation / extrapolation.
    Linear {
        tsc0: u64,
        ns0: u64,
        tsc1: u64,
        ns1: u64,
    },
    /// From one pair and the frequency.
    Rate {
        tsc0: u64,
        ns0: u64,
        ns_per_tick: f64,
    },
}

impl ClockMap {
    pub(crate) fn new(clock: &Clock) -> ClockMap {
        let first = clock.pairs.iter().min_by_key(|p| p.0).copied();
        let last = clock.pairs.iter().max_by_key(|p| p.0).copied();
        let ns_per_tick = if clock.tsc_hz.is_finite() && clock.tsc_hz > 0.0 {
            1e9 / clock.tsc_hz
        } else {
            1.0
        };
        match (first, last) {
            (Some((tsc0, ns0)), Some((tsc1, ns1))) if tsc1 > tsc0 && ns1 >= ns0 => {
                ClockMap::Linear {
                    tsc0,
                    ns0,
                    tsc1,
                    ns1,
                }
            }
            (Some((tsc0, ns0)), _) => ClockMap::Rate {
                tsc0,
                ns0,
                ns_per_tick,
            },
            (None, _) => ClockMap::Rate {
                tsc0: 0,
                ns0: 0,
                ns_per_tick,
            },
        }
    }

    pub(crate) fn to_ns(self, tsc: u64) -> u64 {
        let ns: i128 = match self {
            ClockMap::Linear {
                tsc0,
                ns0,
                tsc1,
                ns1,
            } => {
                let dt = i128::from(tsc) - i128::from(tsc0);
                let span_ns = i128::from(ns1) - i128::from(ns0);
                let span_tsc = i128::from(tsc1) - i128::from(tsc0);
                let scaled = match dt.checked_mul(span_ns) {
                    Some(product) => product.div_euclid(span_tsc),
                    // Only for absurd values (a corrupt calibration).
                    None => (dt as f64 * (span_ns as f64 / span_tsc as f64)) as i128,
                };
                i128::from(ns0) + scaled
            }
            ClockMap::Rate {
                tsc0,
                ns0,
                ns_per_tick,
            } => {
                let dt = i128::from(tsc) - i128::from(tsc0);
                // f64 -> i128 casts saturate; NaN becomes 0.
                i128::from(ns0) + ((dt as f64) * ns_per_tick).round() as i128
            }
        };
        ns.clamp(0, i128::from(u64::MAX)) as u64
    }
}
