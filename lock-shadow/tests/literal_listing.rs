//! Invariant: at most one holder. The listing read literally (step 10 trusting the main row
//! read at step 1) breaks it; the fresh read of step 10 keeps it. Both on the same seeds.
use lock_core::conformance::{self as c, EmbeddedFixture, Mode};
use lock_shadow::{ShadowConfig, ShadowLocker};
use std::sync::Arc;

fn fixture(seed: u64, reread_main: bool) -> EmbeddedFixture {
    EmbeddedFixture::new(seed, Mode::Simulated, move |client, ctx| {
        Arc::new(
            ShadowLocker::new(client, ctx, ShadowConfig { reread_main, ..Default::default() })
                .expect("config"),
        ) as Arc<dyn lock_core::Locker>
    })
}

/// Runs the contention scenario and reports whether it found two holders at once.
fn overlaps(seed: u64, reread_main: bool) -> bool {
    let holds = c::run(
        Mode::Simulated,
        seed,
        |s| async move { fixture(s, reread_main) },
        |fx| async move { c::contended_holds(fx, 64, 4, seed).await },
    );
    assert_eq!(holds.len(), 256);
    match c::check_exclusive(&holds) {
        Ok(_) => false,
        Err(e) => {
            eprintln!("seed {seed}, reread_main = {reread_main}: {e}");
            true
        }
    }
}

#[test]
fn literal_step_10_admits_two_holders_and_the_fresh_read_does_not() {
    let seeds = 0..4u64;
    let literal = seeds.clone().filter(|s| overlaps(*s, false)).count();
    let fresh = seeds.clone().filter(|s| overlaps(*s, true)).count();
    eprintln!("listing 3 read literally: overlap on {literal} of 4 seeds; with the fresh read: {fresh} of 4");
    assert!(literal > 0, "the counterexample no longer reproduces");
    assert_eq!(fresh, 0);
}
