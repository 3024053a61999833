//! A client program's output read line by line on a thread of its own, so that a session
//! (`psql`, `mariadb`) can wait for a line with a timeout.

use std::io::{BufRead, BufReader, Read};
use std::sync::mpsc::{self, Receiver};

/// Forward `r`'s lines to the returned receiver, then `None` at its end.
pub(crate) fn forward_lines(r: impl Read + Send + 'static) -> Receiver<Option<String>> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            if tx.send(Some(line)).is_err() {
                return;
            }
        }
        let _ = tx.send(None);
    });
    rx
}
