//! `bench-harness`: parse the command line, run, map failures to exit codes (clap exits with 2
//! on usage errors by itself, and so do the usage errors found after parsing; the checker exits
//! with 3 when it finds a run unsafe; every other failure exits with 1).
use bench_harness::Failure;
use clap::{CommandFactory, Parser};
use std::process::ExitCode;

/// mimalloc rather than the system's malloc: the simulator's store requests allocate and free
/// many small buffers, and glibc's malloc spent a quarter of a run on them.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

// mimalloc's options (`mimalloc.h`), set before the run allocates anything that matters.
extern "C" {
    fn mi_option_set(option: std::ffi::c_int, value: std::ffi::c_long);
}
/// `mi_option_purge_delay`: how long freed memory stays committed before it is given back.
const MI_OPTION_PURGE_DELAY: std::ffi::c_int = 15;

/// How long, in milliseconds, freed memory stays committed before it is given back:
/// mimalloc's default is 10, longer than a simulated run's bursts of freeing and allocating
/// (an analysis's temporary tables, a store row copied on write), so every burst stayed
/// resident. At 0 every freed span is given back at once, one `madvise` each, at no cost the
/// runs measure (they are bound by the simulation's own work).
const PURGE_DELAY_MS: std::ffi::c_long = 0;

/// Sets mimalloc's purge delay to [`PURGE_DELAY_MS`].
fn return_freed_memory_at_once() {
    // SAFETY: `mi_option_set` only stores the value in mimalloc's option table; it is safe
    // to call at any time, from any thread.
    unsafe { mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) }
}

fn main() -> ExitCode {
    return_freed_memory_at_once();
    let cli = bench_harness::cli::Cli::parse();
    let Err(e) = bench_harness::run(cli) else { return ExitCode::SUCCESS };
    let failure = bench_harness::Failure::of(&e);
    match failure {
        // clap's own form of a usage error (and its exit code, 2).
        Failure::Usage => bench_harness::cli::Cli::command()
            .error(clap::error::ErrorKind::ArgumentConflict, failure.message(&e))
            .exit(),
        Failure::Unsafe => eprintln!("check: {}", failure.message(&e)),
        Failure::Failed => eprintln!("error: {e:#}"),
    }
    ExitCode::from(failure.exit_code())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::{c_char, c_void, CStr};

    extern "C" {
        fn mi_options_print_out(
            out: unsafe extern "C" fn(*const c_char, *mut c_void),
            arg: *mut c_void,
        );
    }

    /// Appends one line of mimalloc's output to the `String` behind `arg`.
    unsafe extern "C" fn collect(msg: *const c_char, arg: *mut c_void) {
        // SAFETY: mimalloc passes a NUL-terminated message and the `arg` given below, a
        // `String` that outlives the call.
        let (msg, out) = unsafe { (CStr::from_ptr(msg), &mut *arg.cast::<String>()) };
        out.push_str(&msg.to_string_lossy());
    }

    /// The option number is mimalloc's purge delay (its enumeration is not in any Rust
    /// binding): after the call, mimalloc's own listing shows `purge_delay` at the value set.
    #[test]
    fn the_option_set_is_mimallocs_purge_delay() {
        return_freed_memory_at_once();
        let mut printed = String::new();
        // SAFETY: `collect` matches mimalloc's `mi_output_fun`; `printed` lives past the call.
        unsafe { mi_options_print_out(collect, (&raw mut printed).cast::<c_void>()) };
        let line = printed.lines().find(|l| l.contains("'purge_delay'")).unwrap_or_else(|| {
            panic!("no purge_delay in mimalloc's options:\n{printed}");
        });
        assert!(line.trim_end().ends_with(&format!(": {PURGE_DELAY_MS}")), "{line}");
    }
}
