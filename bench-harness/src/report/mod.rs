//! Reporting: everything a person or a script reads, from [`crate::measure::summary::Summary`]
//! alone.
//!
//! - [`console`]: the aligned plain-text layout of every console table, within 120 columns;
//! - [`table`]: the console comparison table (with its errors column and first errors) and
//!   the notes under it;
//! - [`files`]: `summary.json`, `grants.csv`, atomic writes, output directory checks;
//! - [`charts`]: line charts and owner timelines (plotters, PNG and SVG, no system libraries);
//! - [`figures`]: the charts of one run (latency CDF, owner timeline, grants per contender);
//! - [`progress`]: progress bars and status lines on a terminal's stderr.

pub mod charts;
pub mod console;
pub mod figures;
pub mod files;
pub mod progress;
pub mod shares;
pub mod table;
