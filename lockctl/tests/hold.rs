//! `lockctl lock`: commands run in turn, with their tokens; a lost lock stops the command;
//! `--try`, `--timeout`, exit codes passed through.

use crate::support::{alive, wait_for_file, TestNode};
use lock_service::client::ClientConfig;
use std::process::Stdio;
use std::time::{Duration, Instant};

/// Two `lockctl lock` on one name run their commands one after the other, each with the
/// lock's name and a fencing token greater than the one before.
#[test]
fn two_lockctls_on_one_name_run_their_commands_in_turn_with_rising_tokens() {
    let node = TestNode::start(&[]);
    let log = node.dir.path().join("log");
    let script = format!(
        "echo \"start $LOCK_NAME $LOCK_FENCING_TOKEN\" >> {0}; sleep 0.4; \
         echo \"end $LOCK_NAME $LOCK_FENCING_TOKEN\" >> {0}",
        log.display()
    );
    let mut runs: Vec<_> = (0..2)
        .map(|_| {
            node.lockctl().args(["lock", "nightly-job", "--", "sh", "-c", &script]).spawn().unwrap()
        })
        .collect();
    for r in &mut runs {
        assert!(r.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 4, "{text}");
    let token = |i: usize| lines[i][2].parse::<u64>().unwrap();
    for (i, kind) in ["start", "end", "start", "end"].into_iter().enumerate() {
        assert_eq!((lines[i][0], lines[i][1]), (kind, "nightly-job"), "{text}");
    }
    assert_eq!(token(0), token(1), "one run, one token: {text}");
    assert_eq!(token(2), token(3), "{text}");
    assert!(token(2) > token(0), "the second run's token is greater: {text}");
}

/// An administrator's force-release stops the holder's command (and what it started) and
/// lockctl exits 76; the lock goes to the next.
#[test]
fn a_force_released_holder_has_its_command_stopped_and_exits_76() {
    let node = TestNode::start(&[]);
    let pids = node.dir.path().join("pids");
    // The shell starts a child of its own: the whole group must go, not only the shell.
    let script = format!("sleep 60 & echo \"$$ $!\" > {}; wait", pids.display());
    let started = Instant::now();
    let mut holder = node
        .lockctl()
        .args(["lock", "--grace", "2s", "deploy", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = wait_for_file(&pids, Duration::from_secs(20));
    let pids: Vec<i32> = line.split_whitespace().map(|p| p.parse().unwrap()).collect();
    assert!(pids.iter().all(|p| alive(*p)));
    let admin = node.admin(ClientConfig::default());
    assert!(node.block_on(admin.force_release("deploy")).unwrap(), "deploy was held");
    let status = holder.wait().unwrap();
    let stderr = std::io::read_to_string(holder.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(76), "{stderr}");
    assert!(stderr.contains("lost the lock \"deploy\""), "{stderr}");
    for p in pids {
        assert!(!alive(p), "process {p} outlived the lock");
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    // The lock is free for the next holder.
    let next = node.lockctl().args(["lock", "--try", "deploy", "--", "true"]).status().unwrap();
    assert_eq!(next.code(), Some(0));
}

/// A command that ignores SIGTERM is killed after the grace period.
#[test]
fn a_command_that_ignores_sigterm_is_killed_after_the_grace_period() {
    let node = TestNode::start(&[]);
    let ready = node.dir.path().join("ready");
    let script =
        format!("trap '' TERM; echo up > {}; while :; do sleep 0.1; done", ready.display());
    let mut holder = node
        .lockctl()
        .args([
            "--output", "json", "lock", "--grace", "500ms", "stubborn", "--", "sh", "-c", &script,
        ])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let admin = node.admin(ClientConfig::default());
    assert!(node.block_on(admin.force_release("stubborn")).unwrap());
    let status = holder.wait().unwrap();
    let stderr = std::io::read_to_string(holder.stderr.take().unwrap()).unwrap();
    assert_eq!(status.code(), Some(76), "{stderr}");
    let events: Vec<serde_json::Value> =
        stderr.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    assert_eq!(events[0]["event"], "acquired", "{stderr}");
    assert_eq!(events.last().unwrap()["event"], "lost", "{stderr}");
    assert_eq!(events.last().unwrap()["killed"], true, "{stderr}");
}

/// `--try` exits 75 while another holds the lock, `--timeout` 124; a command's exit code and
/// death by a signal come through; a missing command is 127, an invalid name 64.
#[test]
fn exit_codes_say_what_happened() {
    let node = TestNode::start(&[]);
    let ready = node.dir.path().join("ready");
    let script = format!("echo up > {}; sleep 60", ready.display());
    let mut holder =
        node.lockctl().args(["lock", "busy", "--", "sh", "-c", &script]).spawn().unwrap();
    wait_for_file(&ready, Duration::from_secs(20));
    let code = |args: &[&str]| node.lockctl().args(args).status().unwrap().code();
    assert_eq!(code(&["lock", "--try", "busy", "--", "true"]), Some(75));
    assert_eq!(code(&["lock", "--timeout", "300ms", "busy", "--", "true"]), Some(124));
    assert_eq!(code(&["lock", "free", "--", "sh", "-c", "exit 3"]), Some(3));
    assert_eq!(code(&["lock", "free", "--", "sh", "-c", "kill -9 $$"]), Some(128 + 9));
    assert_eq!(code(&["lock", "free", "--", "/no/such/command"]), Some(127));
    assert_eq!(code(&["lock", "bad/name", "--", "true"]), Some(64));
    assert_eq!(
        code(&["lock", "-n", "2", "slots", "--", "sh", "-c", "test \"$LOCK_PERMITS\" = 2"]),
        Some(0)
    );
    // lockctl passes SIGTERM on to its command, waits for it, and releases the lock.
    unsafe { libc::kill(holder.id() as i32, libc::SIGTERM) };
    let status = holder.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
    assert_eq!(code(&["lock", "--try", "busy", "--", "true"]), Some(0));
}

/// Up to N holders of a semaphore's permits at once, and the next one waits.
#[test]
fn a_semaphore_admits_n_commands_at_once() {
    let node = TestNode::start(&[]);
    let dir = node.dir.path();
    let mut holders = Vec::new();
    for i in 0..2 {
        let script = format!("echo up > {}/ready{i}; sleep 60", dir.display());
        holders.push(
            node.lockctl()
                .args(["lock", "-n", "2", "pool", "--", "sh", "-c", &script])
                .spawn()
                .unwrap(),
        );
    }
    for i in 0..2 {
        wait_for_file(&dir.join(format!("ready{i}")), Duration::from_secs(20));
    }
    let third = node.lockctl().args(["lock", "-n", "2", "--try", "pool", "--", "true"]).status();
    assert_eq!(third.unwrap().code(), Some(75));
    for mut h in holders {
        unsafe { libc::kill(h.id() as i32, libc::SIGTERM) };
        h.wait().unwrap();
    }
    let after = node.lockctl().args(["lock", "-n", "2", "--try", "pool", "--", "true"]).status();
    assert_eq!(after.unwrap().code(), Some(0));
}

/// Two `lockctl elect` on one election lead one after the other, each with its term as its
/// token and its value in the environment; `elect --observe` prints each leader and the
/// vacancy between, and exits 0 on SIGTERM.
#[test]
fn candidates_lead_in_turn_and_an_observer_sees_each_leader() {
    let node = TestNode::start(&[]);
    let observer = node
        .lockctl()
        .args(["--output", "json", "elect", "--observe", "scheduler"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let log = node.dir.path().join("log");
    let script =
        format!("echo \"$LOCK_FENCING_TOKEN $LOCK_LEADER_VALUE\" >> {}; sleep 0.3", log.display());
    let runs: Vec<_> = ["first", "second"]
        .into_iter()
        .map(|v| {
            let args = ["elect", "--value", v, "scheduler", "--", "sh", "-c", &script];
            node.lockctl().args(args).spawn().unwrap()
        })
        .collect();
    for mut r in runs {
        assert!(r.wait().unwrap().success());
    }
    let text = std::fs::read_to_string(&log).unwrap();
    let lines: Vec<Vec<&str>> = text.lines().map(|l| l.split(' ').collect()).collect();
    assert_eq!(lines.len(), 2, "{text}");
    let mut values: Vec<&str> = lines.iter().map(|l| l[1]).collect();
    values.sort();
    assert_eq!(values, ["first", "second"], "{text}");
    let terms: Vec<u64> = lines.iter().map(|l| l[0].parse().unwrap()).collect();
    assert!(terms[1] > terms[0], "{text}");
    // The observer saw both leaders (it may have come after the first began).
    std::thread::sleep(Duration::from_millis(300));
    unsafe { libc::kill(observer.id() as i32, libc::SIGTERM) };
    let out = observer.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let seen = String::from_utf8(out.stdout).unwrap();
    let changes: Vec<serde_json::Value> =
        seen.lines().map(|l| serde_json::from_str(l).expect(l)).collect();
    let leaders: Vec<&str> = changes.iter().filter_map(|c| c["leader"]["value"].as_str()).collect();
    assert!(leaders.contains(&lines[1][1]), "{seen}");
    assert!(changes.last().unwrap()["leader"].is_null(), "{seen}");
}
