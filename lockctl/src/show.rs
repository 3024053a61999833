//! The subcommands that print: `status`, `locks`, `release --force` and `member`, in text for
//! people or JSON lines for scripts.

use crate::cli::{MemberCommand, Output};
use crate::exit::{CtlError, Exit};
use lock_service::client::ServiceAdmin;
use lock_service::proto::{HolderInfo, LockInfo, Member, Share, WaiterInfo};
use serde_json::{json, Value};

/// Tell `lockctl lock`'s news on standard error (standard output is the command's): `value`
/// as a JSON line, or `text` if it says anything.
pub fn event(out: Output, value: Value, text: impl FnOnce() -> String) {
    match out {
        Output::Json => eprintln!("{value}"),
        Output::Text => {
            let t = text();
            if !t.is_empty() {
                eprintln!("{t}");
            }
        }
    }
}

/// `lockctl status`: every member's view. Exits 1 when a member does not answer or no node
/// leads.
pub async fn status(admin: &ServiceAdmin, out: Output) -> Result<i32, CtlError> {
    let first = admin.status().await.map_err(|e| CtlError::admin("status", e))?;
    let mut healthy = first.leader.is_some();
    let mut rows = Vec::new();
    for m in &first.members {
        let role_of = |leads: bool| match (leads, m.voter) {
            (true, _) => "leader",
            (false, true) => "follower",
            (false, false) => "learner",
        };
        // The node whose status came first is not asked again.
        let answer = match m.id == first.id {
            true => Ok(first.clone()),
            false => admin.status_of(&m.client).await,
        };
        match answer {
            Ok(s) => {
                let role = role_of(s.leader == Some(s.id));
                if out == Output::Json {
                    println!(
                        "{}",
                        json!({"id": m.id, "client": m.client, "peer": m.peer, "voter": m.voter, "role": role, "status": s})
                    );
                }
                rows.push(vec![
                    m.id.to_string(),
                    m.client.clone(),
                    role.into(),
                    s.term.to_string(),
                    opt(s.committed),
                    opt(s.applied),
                    opt(s.last_log),
                    s.sessions.to_string(),
                    s.locks.to_string(),
                ]);
            }
            Err(e) => {
                healthy = false;
                if out == Output::Json {
                    println!(
                        "{}",
                        json!({"id": m.id, "client": m.client, "peer": m.peer, "voter": m.voter, "role": "unreachable", "error": e.to_string()})
                    );
                }
                let mut row = vec![m.id.to_string(), m.client.clone(), "unreachable".into()];
                row.push(e.to_string());
                rows.push(row);
            }
        }
    }
    if out == Output::Text {
        let leader = first.leader.map_or("none".to_string(), |l| l.to_string());
        println!(
            "leader: {leader}, term {}, forced releases {}",
            first.term, first.forced_releases
        );
        let head = [
            "ID",
            "CLIENT",
            "ROLE",
            "TERM",
            "COMMITTED",
            "APPLIED",
            "LAST LOG",
            "SESSIONS",
            "LOCKS",
        ];
        print_table(&head, &rows);
    }
    Ok(if healthy { Exit::Ok } else { Exit::NotFound }.code())
}

/// `lockctl locks [PREFIX]`.
pub async fn locks(admin: &ServiceAdmin, prefix: &str, out: Output) -> Result<i32, CtlError> {
    let locks = admin.all_locks(prefix).await.map_err(|e| CtlError::admin("locks", e))?;
    match out {
        Output::Json => {
            for l in &locks {
                println!("{}", serde_json::to_string(l).expect("a lock listing serialises"));
            }
        }
        Output::Text => {
            let rows: Vec<Vec<String>> = locks.iter().map(lock_row).collect();
            print_table(&["LOCK", "TOKEN", "HOLDERS", "HELD FOR", "WAITERS"], &rows);
        }
    }
    Ok(Exit::Ok.code())
}

fn lock_row(l: &LockInfo) -> Vec<String> {
    let tokens: Vec<String> = l.holders.iter().map(|h| h.token.to_string()).collect();
    let holders: Vec<String> = l.holders.iter().map(holder).collect();
    let held: Vec<String> = l
        .holders
        .iter()
        .map(|h| h.held_ms.map_or("?".into(), |ms| format!("{:.1}s", ms as f64 / 1000.0)))
        .collect();
    let waiters: Vec<String> = l.waiters.iter().map(waiter).collect();
    let waiters = match waiters.len() {
        0 => "-".to_string(),
        n => format!("{n}: {}", waiters.join(", ")),
    };
    vec![l.lock.clone(), tokens.join(","), holders.join(", "), held.join(","), waiters]
}

fn who(identity: &Option<String>, owner: &str, session: u64, share: Share) -> String {
    let id = identity.as_deref().map(|i| format!("{i}/")).unwrap_or_default();
    let share = match share {
        Share::Exclusive => String::new(),
        Share::Read => " read".into(),
        Share::Permits { count, limit } => format!(" {count}/{limit}"),
    };
    format!("{id}{owner} (session {session}{share})")
}

fn holder(h: &HolderInfo) -> String {
    who(&h.identity, &h.owner, h.session, h.share)
}

fn waiter(w: &WaiterInfo) -> String {
    who(&w.identity, &w.owner, w.session, w.share)
}

/// `lockctl release --force NAME`: exits 1 when nobody held it.
pub async fn force_release(admin: &ServiceAdmin, name: &str, out: Output) -> Result<i32, CtlError> {
    let held = admin
        .force_release(name)
        .await
        .map_err(|e| CtlError::admin(format!("release --force {name:?}"), e))?;
    match out {
        Output::Json => println!("{}", json!({"lock": name, "released": held})),
        Output::Text if held => println!("released {name:?}: its holder was told"),
        Output::Text => println!("{name:?} was not held"),
    }
    Ok(if held { Exit::Ok } else { Exit::NotFound }.code())
}

/// `lockctl member ...`.
pub async fn member(
    admin: &ServiceAdmin,
    command: &MemberCommand,
    out: Output,
) -> Result<i32, CtlError> {
    let members = match command {
        MemberCommand::List => {
            admin.status().await.map_err(|e| CtlError::admin("member list", e))?.members
        }
        MemberCommand::Add { id, peer, client } => admin
            .add_member(*id, peer, client)
            .await
            .map_err(|e| CtlError::admin(format!("member add {id}"), e))?,
        MemberCommand::Remove { id } => admin
            .remove_member(*id)
            .await
            .map_err(|e| CtlError::admin(format!("member remove {id}"), e))?,
    };
    print_members(&members, out);
    Ok(Exit::Ok.code())
}

fn print_members(members: &[Member], out: Output) {
    match out {
        Output::Json => {
            for m in members {
                println!("{}", serde_json::to_string(m).expect("a member serialises"));
            }
        }
        Output::Text => {
            let rows: Vec<Vec<String>> = members
                .iter()
                .map(|m| {
                    let kind = if m.voter { "voter" } else { "learner" };
                    vec![m.id.to_string(), kind.into(), m.peer.clone(), m.client.clone()]
                })
                .collect();
            print_table(&["ID", "KIND", "PEER", "CLIENT"], &rows);
        }
    }
}

fn opt(v: Option<u64>) -> String {
    v.map_or("-".into(), |v| v.to_string())
}

/// Columns padded to their widest cell; the last column is not padded.
fn print_table(head: &[&str], rows: &[Vec<String>]) {
    let mut widths: Vec<usize> = head.iter().map(|h| h.len()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if i < widths.len() {
                widths[i] = widths[i].max(cell.chars().count());
            }
        }
    }
    let line = |cells: Vec<&str>| {
        let n = cells.len();
        let mut s = String::new();
        for (i, c) in cells.into_iter().enumerate() {
            if i + 1 == n {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths.get(i).copied().unwrap_or(0)));
            }
        }
        println!("{}", s.trim_end());
    };
    line(head.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
}
