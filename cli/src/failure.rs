//! Why a command failed, and the exit code that says so.

use std::fmt;

use leasehold::{LockError, Verdict};

/// A command that did not do what it was asked.
#[derive(Debug)]
pub enum Failure {
    /// The lock library refused or failed.
    Lock(LockError),
    /// The command was declined: not forced, or not confirmed.
    NotDone(String),
    /// An option cannot be used, e.g. an unreadable --password-file.
    Usage(String),
    /// The terminal, stdin or stdout failed.
    Io(std::io::Error),
    /// `doctor` found the deployment at risk or degraded (its report is
    /// printed already).
    Verdict(Verdict),
    /// `verify` found the lock failing (`lock-failed`) or a guarantee
    /// broken (`violated`); its report is printed already.
    Verify(&'static str),
}

impl Failure {
    /// The process's exit code for this failure (listed in `--help`).
    pub fn exit_code(&self) -> u8 {
        match self {
            Failure::Lock(LockError::InvalidUrl { .. } | LockError::InvalidOptions(_))
            | Failure::Usage(_) => 2,
            Failure::Lock(
                LockError::Connection { .. }
                | LockError::Tls { .. }
                | LockError::UnknownService { .. },
            ) => 3,
            Failure::NotDone(_) => 4,
            Failure::Lock(LockError::Auth { .. } | LockError::PermissionDenied { .. }) => 5,
            Failure::Verdict(Verdict::AtRisk) => 6,
            Failure::Verdict(_) => 7,
            Failure::Verify("lock-failed") => 8,
            Failure::Verify(_) => 9,
            Failure::Lock(_) | Failure::Io(_) => 1,
        }
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Failure::Lock(err) => write!(f, "{err}"),
            Failure::NotDone(why) | Failure::Usage(why) => f.write_str(why),
            Failure::Io(err) => write!(f, "terminal or standard stream failed: {err}"),
            Failure::Verdict(verdict) => {
                write!(f, "the deployment is {verdict}: see the report above")
            }
            Failure::Verify(verdict) => write!(f, "verify: {verdict}: see the report above"),
        }
    }
}

impl From<LockError> for Failure {
    fn from(err: LockError) -> Self {
        Failure::Lock(err)
    }
}

impl From<std::io::Error> for Failure {
    fn from(err: std::io::Error) -> Self {
        Failure::Io(err)
    }
}
