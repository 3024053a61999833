//! The faults' vocabulary: what `--faults KIND:DURATION@PERIOD,...` names ([`FaultKind`],
//! [`FaultSpec`], [`FaultPlan`]), parsed and printed. A leaf below the engines, the
//! configuration and the runner, which all speak of fault kinds; the nemesis that injects them
//! into a running benchmark is [`crate::run::nemesis`].

pub mod spec;

pub use spec::{FaultKind, FaultPlan, FaultSpec};
