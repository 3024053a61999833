//! Durations and the time distributions of the hold and think phases.
//!
//! Durations are written as a number and a unit: `800us` (or `800µs`), `5ms`, `1.5s`, `2m`,
//! `1h`; a bare `0` is zero. A [`Dist`] is one of
//!
//! | text | meaning |
//! |---|---|
//! | `5ms` or `fixed:5ms` | always 5 ms |
//! | `uniform:1ms..10ms` | uniform between 1 and 10 ms |
//! | `exp:5ms` | exponential with a mean of 5 ms (capped at 50 × the mean) |
//!
//! Both parse with [`std::str::FromStr`] and print back in the same form, so a configuration
//! echoed into `summary.json` can be pasted back onto the command line.

use rand::rngs::StdRng;
use rand::RngExt;
use serde::{Deserialize, Deserializer, Serializer};
use std::fmt;
use std::str::FromStr;
use std::time::Duration;

/// Parses a duration: a non-negative number followed by `ns`, `us`/`µs`, `ms`, `s`, `m`/`min`,
/// `h` or `d`; a bare `0` is zero.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let s = text.trim();
    if s.is_empty() {
        return Err("empty duration (expected e.g. 5ms, 800us, 1.5s)".into());
    }
    if s.starts_with('-') {
        return Err(format!("'{text}' is negative: durations must be zero or more"));
    }
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let value: f64 = num.parse().map_err(|_| {
        format!("'{text}' is not a duration (expected a number and a unit, e.g. 5ms, 800us, 1.5s)")
    })?;
    let scale_ns: f64 = match unit.trim() {
        "" if value == 0.0 => 0.0,
        "" => return Err(format!("'{text}' has no unit (write e.g. {num}ms or {num}s)")),
        "ns" => 1.0,
        "us" | "µs" | "μs" => 1e3,
        "ms" => 1e6,
        "s" | "sec" => 1e9,
        "m" | "min" => 60e9,
        "h" => 3600e9,
        "d" => 86400e9,
        other => {
            return Err(format!(
                "unknown unit '{other}' in '{text}' (use ns, us, ms, s, m, h or d)"
            ))
        }
    };
    let ns = value * scale_ns;
    if !ns.is_finite() || ns > 1e18 {
        return Err(format!("'{text}' is too long"));
    }
    Ok(Duration::from_nanos(ns.round() as u64))
}

/// Parses a duration that must be above zero.
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        return Err(format!("'{text}' is zero: this duration must be above zero"));
    }
    Ok(d)
}

/// Formats a duration in the largest unit up to seconds that shows it exactly: `60s`, `5ms`,
/// `800us`, `1500ns`; whole days as days (`10d`, Cassandra's tombstone grace).
pub fn format_duration(d: Duration) -> String {
    let ns = d.as_nanos();
    if ns == 0 {
        return "0s".into();
    }
    const DAY: u128 = 86_400_000_000_000;
    if ns.is_multiple_of(DAY) {
        return format!("{}d", ns / DAY);
    }
    for (unit, scale) in [("s", 1_000_000_000u128), ("ms", 1_000_000), ("us", 1_000)] {
        if ns.is_multiple_of(scale) {
            return format!("{}{unit}", ns / scale);
        }
    }
    format!("{ns}ns")
}

/// Serde helpers that write a [`Duration`] as its [`format_duration`] text.
pub mod serde_duration {
    use super::*;

    /// Serialize as text.
    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*d))
    }

    /// Deserialize from text.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text).map_err(serde::de::Error::custom)
    }
}

/// A distribution of durations.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dist {
    /// Always the same duration.
    Fixed(Duration),
    /// Uniform in `[lo, hi]`.
    Uniform {
        /// Lower bound.
        lo: Duration,
        /// Upper bound.
        hi: Duration,
    },
    /// Exponential with this mean, capped at [`Dist::EXP_CAP`] times the mean.
    Exp {
        /// The mean.
        mean: Duration,
    },
}

impl Dist {
    /// Samples of an exponential distribution are capped at this multiple of the mean, so that
    /// one unlucky draw cannot stall a short run.
    pub const EXP_CAP: f64 = 50.0;

    /// Draw one duration.
    pub fn sample(&self, rng: &mut StdRng) -> Duration {
        match *self {
            Dist::Fixed(d) => d,
            Dist::Uniform { lo, hi } => {
                let (lo, hi) = (lo.as_nanos() as u64, hi.as_nanos() as u64);
                Duration::from_nanos(rng.random_range(lo..=hi))
            }
            Dist::Exp { mean } => {
                let u: f64 = rng.random::<f64>();
                let x = -(1.0 - u).ln();
                mean.mul_f64(x.min(Self::EXP_CAP))
            }
        }
    }

    /// The distribution's mean (the exponential's cap ignored).
    pub fn mean(&self) -> Duration {
        match *self {
            Dist::Fixed(d) => d,
            Dist::Uniform { lo, hi } => (lo + hi) / 2,
            Dist::Exp { mean } => mean,
        }
    }
}

impl fmt::Display for Dist {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Dist::Fixed(d) => f.write_str(&format_duration(d)),
            Dist::Uniform { lo, hi } => {
                write!(f, "uniform:{}..{}", format_duration(lo), format_duration(hi))
            }
            Dist::Exp { mean } => write!(f, "exp:{}", format_duration(mean)),
        }
    }
}

impl FromStr for Dist {
    type Err = String;
    fn from_str(text: &str) -> Result<Self, String> {
        let s = text.trim();
        let (kind, rest) = match s.split_once(':') {
            Some((k, r)) => (k.trim().to_ascii_lowercase(), r),
            None => ("fixed".to_string(), s),
        };
        match kind.as_str() {
            "fixed" | "const" => Ok(Dist::Fixed(parse_duration(rest)?)),
            "uniform" | "u" => {
                let (lo, hi) = rest
                    .split_once("..")
                    .ok_or_else(|| format!("'{text}': write a uniform range as uniform:LO..HI, e.g. uniform:1ms..10ms"))?;
                let (lo, hi) = (parse_duration(lo)?, parse_duration(hi)?);
                if lo > hi {
                    return Err(format!("'{text}': the lower bound is above the upper bound"));
                }
                Ok(Dist::Uniform { lo, hi })
            }
            "exp" | "exponential" => Ok(Dist::Exp { mean: parse_duration(rest)? }),
            other => Err(format!(
                "unknown distribution '{other}' in '{text}' (use a duration like 5ms, uniform:1ms..10ms or exp:5ms)"
            )),
        }
    }
}

/// Asserts that `T`'s parser refuses each text with an error containing its phrase.
#[cfg(test)]
pub(crate) fn assert_refused<T: FromStr<Err = String> + fmt::Debug>(cases: &[(&str, &str)]) {
    for (text, says) in cases {
        let e = text.parse::<T>().unwrap_err();
        assert!(e.contains(says), "{text}: {e}");
    }
}

/// Implements serde for a type as its text: written with `Display`, read back with `FromStr`
/// (whose error message becomes serde's), so result files show `exp:5ms` or `zipf:0.99` as the
/// command line takes them, and a value they cannot read is an error naming it.
macro_rules! serde_as_text {
    ($t:ty) => {
        impl serde::Serialize for $t {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.collect_str(self)
            }
        }

        impl<'de> serde::Deserialize<'de> for $t {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let text = <String as serde::Deserialize>::deserialize(d)?;
                text.parse().map_err(serde::de::Error::custom)
            }
        }
    };
}
pub(crate) use serde_as_text;

serde_as_text!(Dist);

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;

    #[test]
    fn durations_parse_and_print() {
        assert_eq!(parse_duration("5ms"), Ok(Duration::from_millis(5)));
        assert_eq!(parse_duration("800us"), Ok(Duration::from_micros(800)));
        assert_eq!(parse_duration("800µs"), Ok(Duration::from_micros(800)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert!(parse_duration("5").unwrap_err().contains("no unit"));
        assert!(parse_duration("-5s").unwrap_err().contains("negative"));
        assert!(parse_duration("5parsecs").unwrap_err().contains("unit"));
        assert!(parse_positive_duration("0s").unwrap_err().contains("zero"));
        for d in ["60s", "5ms", "800us", "1500ns", "120s", "0s"] {
            assert_eq!(format_duration(parse_duration(d).unwrap()), d);
        }
    }

    #[test]
    fn dists_parse_print_and_sample() {
        for text in ["5ms", "uniform:1ms..10ms", "exp:5ms", "0s"] {
            let d: Dist = text.parse().unwrap();
            assert_eq!(d.to_string(), text);
        }
        assert_eq!("fixed:2ms".parse::<Dist>(), Ok(Dist::Fixed(Duration::from_millis(2))));
        assert!("uniform:5ms..1ms".parse::<Dist>().is_err());
        assert!("gauss:5ms".parse::<Dist>().is_err());
        let mut rng = StdRng::seed_from_u64(1);
        let u: Dist = "uniform:1ms..3ms".parse().unwrap();
        let e: Dist = "exp:4ms".parse().unwrap();
        let n = 20_000;
        let (mut su, mut se) = (Duration::ZERO, Duration::ZERO);
        for _ in 0..n {
            let x = u.sample(&mut rng);
            assert!(x >= Duration::from_millis(1) && x <= Duration::from_millis(3));
            su += x;
            se += e.sample(&mut rng);
        }
        let mu = su.as_secs_f64() / n as f64 * 1e3;
        let me = se.as_secs_f64() / n as f64 * 1e3;
        assert!((mu - 2.0).abs() < 0.05, "{mu}");
        assert!((me - 4.0).abs() < 0.2, "{me}");
        assert_eq!(u.mean(), Duration::from_millis(2));
    }
}
