//! `lockctl`'s tests, one module per file, linked into one binary. Each starts its own node of
//! the lock service in this process, on free loopback ports, and runs the `lockctl` binary
//! against it.

mod support;

mod admin;
mod hold;
