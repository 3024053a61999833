//! `--primitive`, end to end: the reader-writer lock and the semaphore of the queue on the
//! embedded store and the lock service's election on a node the test starts, each checked
//! grant by grant; the checker on hand-written logs where a reader enters a writer's hold;
//! the usage errors; and the `primitives` experiment's embedded rows.

use crate::support::{run_checked, scratch, BIN};
use std::path::Path;
use std::process::Command;

fn summary(dir: &Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn the_queues_reader_writer_lock_and_semaphore_run_and_check_clean() {
    for (primitive, limit) in [("rw:50", None), ("semaphore:3", Some(3))] {
        let dir = scratch("primitives", &primitive.replace(':', "-"));
        let args = ["--algorithms", "queue", "--threads", "8", "--duration", "10s"];
        let (code, text) = run_checked(&dir, &[&args[..], &["--primitive", primitive]].concat());
        assert_eq!(code, Some(0), "{text}");
        let grants = std::fs::read_to_string(dir.join("grants.csv")).unwrap();
        assert!(grants.lines().next().unwrap().ends_with(",share"), "{grants:.200}");
        let shares: Vec<&str> =
            grants.lines().skip(1).map(|l| l.rsplit(',').next().unwrap()).collect();
        let s = &summary(&dir)["results"][0]["shares"];
        assert_eq!(s["primitive"], primitive);
        match limit {
            // Both kinds were asked for, and readers did share.
            None => {
                assert!(shares.contains(&"r") && shares.contains(&"w"), "{shares:?}");
                assert!(s["max_holders"].as_u64().unwrap() >= 2, "{s}");
                assert!(s["reads"]["count"].as_u64().unwrap() > 0, "{s}");
            }
            // Never more than the size, and more than one at once.
            Some(n) => {
                assert!(shares.iter().all(|s| *s == "1/3"), "{shares:?}");
                let most = s["max_holders"].as_u64().unwrap();
                assert!((2..=n).contains(&most), "{s}");
                assert_eq!(s["limit"], n);
            }
        }
        assert_eq!(summary(&dir)["results"][0]["safety"]["overlapping_holds"], 0);
    }
}

/// The checker reads the share column: a reader granted inside a writer's hold is an
/// overlap, two readers are not, and a third permit of two is.
#[test]
fn the_checker_judges_each_grant_by_its_share() {
    let header =
        "algorithm,lock,contender,requested_us,granted_us,released_us,token,lease_lost,crashed,share";
    let cases = [
        ("reader-in-writer", "q,0,0,0,0,100,1,false,false,w\nq,0,1,0,50,80,2,false,false,r\n", 3),
        ("two-readers", "q,0,0,0,0,100,1,false,false,r\nq,0,1,0,50,80,2,false,false,r\n", 0),
        (
            "third-permit",
            "q,0,0,0,0,100,1,false,false,1/2\nq,0,1,0,10,80,2,false,false,1/2\nq,0,2,0,50,60,3,false,false,1/2\n",
            3,
        ),
    ];
    for (name, rows, expected) in cases {
        let dir = scratch("primitives-check", name);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("grants.csv"), format!("{header}\n{rows}")).unwrap();
        std::fs::write(dir.join("resource.csv"), "algorithm,lock,contender,token,at_us,accepted\n")
            .unwrap();
        std::fs::write(dir.join("faults.csv"), "algorithm,kind,target,start_us,end_us\n").unwrap();
        let out = Command::new(BIN).arg("check").arg(&dir).output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned()
            + &String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(expected), "{name}: {text}");
    }
}

#[test]
fn a_primitive_no_algorithm_has_is_a_usage_error_naming_who_has_it() {
    let run = |args: &[&str]| Command::new(BIN).args(args).output().unwrap();
    let o = run(&["--primitive", "election"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("election") && err.contains("service (service)"), "{err}");
    let o = run(&["--primitive", "rw:90/readers-first", "--algorithms", "queue"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("the queue algorithm has no"), "{err}");
    let o = run(&["--primitive", "semaphore:2/3"]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("at most the semaphore's size (2)"), "{err}");
}

/// The lock service's election with its leader crashed: one leader at a time, and the next
/// one elected once the crashed leader's session runs out.
#[test]
fn the_services_election_fails_over_when_its_leader_crashes() {
    let dir = scratch("primitives", "service-election");
    let args = [
        "--backend",
        "service",
        "--spawn-service",
        "--primitive",
        "election",
        "--threads",
        "4",
        "--ttl",
        "1s",
        "--duration",
        "6s",
        "--faults",
        "crash:1s@3s/who=holder",
    ];
    let (code, text) = run_checked(&dir, &args);
    assert_eq!(code, Some(0), "{text}");
    let s = &summary(&dir)["results"][0]["shares"];
    assert_eq!(s["max_holders"], 1, "{s}");
    assert!(s["failovers"].as_u64().unwrap() >= 1, "a leader crashed: {s}");
    // The crashed leader's session must run out first (1 s), and the next is then elected.
    let max = s["failover_max_ms"].as_f64().unwrap();
    assert!((900.0..5_000.0).contains(&max), "{s}");
}

#[test]
fn the_primitives_experiment_writes_the_queues_rows() {
    let dir = scratch("primitives", "experiment");
    let out = Command::new(BIN)
        .args(["primitives", "--no-servers", "--duration", "5s", "--quiet", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let readme = std::fs::read_to_string(dir.join("README.md")).unwrap();
    for needle in [
        "Reader-writer, 90% reads",
        "Reader-writer, 50% reads",
        "Semaphore of 4",
        "| embedded | queue |",
    ] {
        assert!(readme.contains(needle), "{needle}: {readme}");
    }
    assert!(readme.contains("No row had an overlap"), "{readme}");
    // The README is drawn again from the JSON alone, identically.
    let redraw = Command::new(BIN)
        .args(["primitives", "--no-servers", "--duration", "5s", "--redraw", "--out"])
        .arg(&dir)
        .output()
        .unwrap();
    assert!(redraw.status.success());
    assert_eq!(std::fs::read_to_string(dir.join("README.md")).unwrap(), readme);
}

/// The committed `results/primitives/README.md` is what its `primitives.json` draws: no figure
/// in it was typed by hand.
#[test]
fn the_committed_primitives_readme_is_drawn_from_its_json() {
    let committed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../results/primitives");
    let dir = scratch("primitives", "committed");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::copy(committed.join("primitives.json"), dir.join("primitives.json")).unwrap();
    let out =
        Command::new(BIN).args(["primitives", "--redraw", "--out"]).arg(&dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        std::fs::read_to_string(dir.join("README.md")).unwrap(),
        std::fs::read_to_string(committed.join("README.md")).unwrap(),
        "results/primitives/README.md differs from what its primitives.json draws: run \
         `bench-harness primitives --redraw --out results/primitives`"
    );
}
