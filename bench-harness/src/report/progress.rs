//! Progress bars (indicatif) on stderr, and nothing at all when stderr is not a terminal or
//! `--quiet` was given.

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use std::io::IsTerminal;

/// True when progress may be drawn: not quiet, and stderr is a terminal.
pub fn enabled(quiet: bool) -> bool {
    !quiet && std::io::stderr().is_terminal()
}

/// A bar of `len` steps with `message`; hidden unless [`enabled`].
pub fn bar(len: u64, message: impl Into<String>, quiet: bool, unit: &str) -> ProgressBar {
    if !enabled(quiet) {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(len), ProgressDrawTarget::stderr());
    let template = format!("{{msg:>14}} [{{bar:36.cyan/blue}}] {{pos}}/{{len}} {unit} {{elapsed_precise}} (eta {{eta}})");
    if let Ok(style) = ProgressStyle::with_template(&template) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message.into());
    bar
}

/// A status line on stderr, unless quiet.
pub fn status(quiet: bool, line: &str) {
    if !quiet {
        eprintln!("{line}");
    }
}
