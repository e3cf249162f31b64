//! The options of `#[distributed_lock(...)]`, read into [`Options`]. Only
//! what the user wrote is kept: the runtime's `LockOptions` holds the
//! defaults.

use proc_macro2::{Span, TokenStream};
use syn::{Expr, ExprLit, Lit, LitStr, Path};

use crate::lock::setting::{self, Setting};
use crate::shared::args::{self, Args, Spec, CRATE};
use crate::shared::errors::Errors;

const KEY: &str = "key";
const KEYS: &str = "keys";
const TTL: &str = "ttl";
const WAIT: &str = "wait";
const RENEW: &str = "renew";
const REENTRANT: &str = "reentrant";
const ON_LOST: &str = "on_lost";
const FENCED: &str = "fenced";
const ON_BUSY: &str = "on_busy";
const HOLD_AT_LEAST: &str = "hold_at_least";
/// The longest `hold_at_least`, as the runtime's longest lease: 365 days.
const MAX_HOLD_MS: u64 = 365 * 24 * 3_600_000;
const MANAGER: &str = "manager";
/// The older name of `manager`, still accepted.
const CLIENT: &str = "client";
const MIN_REPLICAS: &str = "min_replicas";
const REPLICA_TIMEOUT: &str = "replica_timeout";
const ALLOW_OPEN_TRANSACTION: &str = "allow_open_transaction";
const PERMITS: &str = "permits";
const MODE: &str = "mode";
const PERIOD: &str = "period";
/// The longest `period`: half the longest lease (its key is kept two periods).
const MAX_PERIOD_MS: u64 = MAX_HOLD_MS / 2;

/// The options that do not go with `mode`, and why.
const NOT_WITH_MODE: [(&str, &str); 4] = [
    (
        PERMITS,
        "a read/write lock admits many readers or one writer, not N holders; write one of them",
    ),
    (
        KEYS,
        "a read/write lock has one key; write `key = \"...\"` with `mode`",
    ),
    (
        HOLD_AT_LEAST,
        "a read or write lease is given back as soon as the body ends",
    ),
    (
        MIN_REPLICAS,
        "read/write leases are not replicated before the body runs",
    ),
];

/// The options that do not go with `permits`, and why.
const NOT_WITH_PERMITS: [(&str, &str); 5] = [
    (
        KEYS,
        "a semaphore has one key; write `key = \"...\"` with `permits`",
    ),
    (
        HOLD_AT_LEAST,
        "a permit is given back as soon as the body ends",
    ),
    (FENCED, "permits carry no fencing token"),
    (
        REENTRANT,
        "a permit is never re-entrant (a nested call of the same semaphore fails at once with `LockError::AlreadyHeld`)",
    ),
    (
        MIN_REPLICAS,
        "permits are not replicated before the body runs",
    ),
];

/// Every option of the attribute.
const SPEC: Spec = Spec {
    options: &[
        KEY,
        KEYS,
        PERMITS,
        MODE,
        TTL,
        WAIT,
        RENEW,
        REENTRANT,
        ON_LOST,
        FENCED,
        ON_BUSY,
        HOLD_AT_LEAST,
        MANAGER,
        MIN_REPLICAS,
        REPLICA_TIMEOUT,
        ALLOW_OPEN_TRANSACTION,
        PERIOD,
        CRATE,
    ],
    renamed: &[(CLIENT, MANAGER)],
    positional: Some(KEY),
};

/// The attribute's configuration: each option `None` unless written.
/// Durations are in milliseconds when written as literals.
pub(crate) struct Options {
    /// The key templates, still unparsed: the key module reads them against
    /// the function's parameters. One for `key`, one or more for `keys`.
    pub(crate) keys: Vec<LitStr>,
    /// Whether they came as `keys = [...]` (every one is locked, all or
    /// nothing) rather than `key = "..."`.
    pub(crate) several: bool,
    /// `permits = N`: the body runs under one of N permits of the key's
    /// semaphore instead of its lock.
    pub(crate) permits: Option<Setting<u32>>,
    /// `mode = "read"` or `"write"`: the body runs under a read or the
    /// write lease of the key's read/write lock instead of its lock.
    pub(crate) mode: Option<Mode>,
    pub(crate) ttl: Option<Setting<u64>>,
    pub(crate) wait: Option<Setting<u64>>,
    pub(crate) renew: Option<bool>,
    pub(crate) reentrant: Option<bool>,
    pub(crate) on_lost: Option<OnLost>,
    pub(crate) fenced: Option<bool>,
    /// What a call does when the lock is held elsewhere.
    pub(crate) on_busy: OnBusy,
    pub(crate) hold_at_least: Option<Setting<u64>>,
    /// Replicas that must acknowledge the acquisition, and how long to wait
    /// for them (`None`: the runtime's default).
    pub(crate) min_replicas: Option<(Setting<u32>, Option<Setting<u64>>)>,
    /// Expression giving the manager; `None` uses the installed one.
    pub(crate) manager: Option<Expr>,
    /// Path of the `leasehold` crate; `None` means `::leasehold`.
    pub(crate) crate_path: Option<Path>,
    /// `period = "1h"`, in milliseconds: the body runs at most once per
    /// period, under the lock on the key of the current period.
    pub(crate) period: Option<u64>,
    /// Accept parameters that look like a caller's open transaction (the
    /// macro's own check, off unless written).
    pub(crate) allow_open_transaction: bool,
}

/// What a call does when the lock is held elsewhere.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnBusy {
    /// Wait up to `wait`, then fail with `LockError::Timeout` (the default).
    Wait,
    /// Return at once without running the body: `Ok(())` or `Ok(None)`.
    Skip,
}

/// Which lease of a read/write lock the body runs under.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    Read,
    Write,
}

/// What the body does when the lease is lost.
#[derive(Clone, Copy)]
pub(crate) enum OnLost {
    Cancel,
    Continue,
}

/// Reads the attribute's arguments, recording each mistake in `errors`; a
/// wrong option is left out so that later checks still run. `None` when the
/// key is missing or not a string, or the arguments are not `name = value`
/// pairs.
pub(crate) fn parse(tokens: TokenStream, errors: &mut Errors) -> Option<Options> {
    let mut args = Args::parse(tokens, &SPEC, errors)?;
    if args.name_of(PERMITS).is_some() {
        for (option, why) in NOT_WITH_PERMITS {
            if let Some(name) = args.name_of(option) {
                let message = format!("`{option}` cannot be used with `{PERMITS}`: {why}");
                errors.push(syn::Error::new(name.span(), message));
            }
        }
    }
    if args.name_of(MODE).is_some() {
        for (option, why) in NOT_WITH_MODE {
            if let Some(name) = args.name_of(option) {
                let message = format!("`{option}` cannot be used with `{MODE}`: {why}");
                errors.push(syn::Error::new(name.span(), message));
            }
        }
    }
    if let Some(period) = args.name_of(PERIOD) {
        for other in [KEYS, PERMITS, MODE] {
            if args.name_of(other).is_some() {
                let message = format!(
                    "`{PERIOD}` cannot be used with `{other}`: a periodic job runs under the plain lock on one key"
                );
                errors.push(syn::Error::new(period.span(), message));
            }
        }
    }
    let permits = read(&mut args, PERMITS, permit_count, errors);
    let mode = read(&mut args, MODE, mode, errors);
    if let (Some((Mode::Read, _)), Some(fenced)) = (mode, args.name_of(FENCED)) {
        let message = format!(
            r#"`{FENCED}` cannot be used with `{MODE} = "read"`: readers carry no fencing token (writers' tokens rise with every writer)"#
        );
        errors.push(syn::Error::new(fenced.span(), message));
    }
    let mode = mode.map(|(mode, _)| mode);
    let (keys, several) = match (args.take(KEY), args.take(KEYS)) {
        (Some(key), None) => (
            errors
                .check(args::string(&key.value, KEY, r#""order:{order.id}""#))
                .map(|key| vec![key]),
            false,
        ),
        (None, Some(keys)) => (errors.check(key_list(&keys.value)), true),
        (Some(_), Some(keys)) => {
            let message = format!(
                "write either `{KEY}` or `{KEYS}`, not both: `{KEYS} = [..]` locks every key it lists"
            );
            errors.push(syn::Error::new(keys.name.span(), message));
            (None, true)
        }
        (None, None) => {
            let message = format!(
                "missing `{KEY}`: write e.g. `#[distributed_lock({KEY} = \"order:{{order.id}}\")]`, or `{KEYS} = [\"a:{{x}}\", \"b:{{y}}\"]` for several"
            );
            errors.push(syn::Error::new(Span::call_site(), message));
            (None, false)
        }
    };
    let ttl = read(&mut args, TTL, lease, errors);
    let wait = read(&mut args, WAIT, setting::duration, errors);
    let renew = read(&mut args, RENEW, args::boolean, errors);
    let reentrant = read(&mut args, REENTRANT, args::boolean, errors);
    let on_lost = read(&mut args, ON_LOST, on_lost, errors);
    let fenced = read(&mut args, FENCED, args::boolean, errors);
    let on_busy = read(&mut args, ON_BUSY, on_busy, errors);
    let hold_at_least = read(&mut args, HOLD_AT_LEAST, hold, errors);
    let period_span = args.name_of(PERIOD).map(|name| name.span());
    let period = read(&mut args, PERIOD, period, errors);
    if let (Some(span), false) = (period_span, matches!(on_busy, Some((OnBusy::Skip, _)))) {
        let message = format!(
            r#"`{PERIOD}` needs `{ON_BUSY} = "skip"`: a call of a period that already ran (or runs elsewhere) skips"#
        );
        errors.push(syn::Error::new(span, message));
    }
    if let (Some((OnBusy::Skip, _)), Some((_, wait_span))) = (on_busy, &wait) {
        let message = format!(
            r#"`{WAIT}` has no effect with `{ON_BUSY} = "skip"`, which returns at once when the lock is busy; remove one of them"#
        );
        errors.push(syn::Error::new(*wait_span, message));
    }
    let allow_open_transaction = read(&mut args, ALLOW_OPEN_TRANSACTION, args::boolean, errors);
    let ttl = ttl.map(|(ttl, _)| ttl);
    let fixed_ttl = ttl.as_ref().and_then(Setting::fixed);
    let min_replicas = replication(&mut args, fixed_ttl, errors);
    let manager = args.take(MANAGER).map(|arg| arg.value);
    let crate_path = args
        .take(CRATE)
        .and_then(|arg| errors.check(args::crate_path(arg.value)));
    Some(Options {
        keys: keys?,
        several,
        permits,
        mode,
        ttl,
        wait: wait.map(|(wait, _)| wait),
        renew,
        reentrant,
        on_lost,
        fenced,
        on_busy: on_busy.map_or(OnBusy::Wait, |(on_busy, _)| on_busy),
        hold_at_least,
        period,
        min_replicas,
        manager,
        crate_path,
        allow_open_transaction: allow_open_transaction.unwrap_or(false),
    })
}

/// The value of `option` read by `reader`, if given; a mistake is recorded
/// and gives `None`.
fn read<T>(
    args: &mut Args,
    option: &str,
    reader: fn(&Expr, &str) -> syn::Result<T>,
    errors: &mut Errors,
) -> Option<T> {
    let arg = args.take(option)?;
    errors.check(reader(&arg.value, option))
}

/// The `crate = path` option alone, if given and readable; for re-emitting
/// the attribute. Other mistakes are reported when it expands.
pub(crate) fn crate_path_only(tokens: TokenStream) -> Option<Path> {
    let mut args = Args::parse(tokens, &SPEC, &mut Errors::default())?;
    args::crate_path(args.take(CRATE)?.value).ok()
}

/// `min_replicas` and `replica_timeout`; the timeout needs `min_replicas`,
/// and without a timeout the runtime chooses its default. `ttl_ms` is the
/// ttl if written as a literal.
fn replication(
    args: &mut Args,
    ttl_ms: Option<u64>,
    errors: &mut Errors,
) -> Option<(Setting<u32>, Option<Setting<u64>>)> {
    match (args.take(MIN_REPLICAS), args.take(REPLICA_TIMEOUT)) {
        (None, None) => None,
        (None, Some(timeout)) => {
            let message = format!(
                "`{REPLICA_TIMEOUT}` needs `{MIN_REPLICAS}`, \
                 e.g. `{MIN_REPLICAS} = 1, {REPLICA_TIMEOUT} = \"200ms\"`"
            );
            errors.push(syn::Error::new(timeout.name.span(), message));
            None
        }
        (Some(replicas), timeout) => {
            let replicas = errors.check(replica_count(&replicas.value));
            let timeout_ms = match timeout {
                Some(timeout) => Some(errors.check(replica_timeout(&timeout.value, ttl_ms))?),
                None => None,
            };
            Some((replicas?, timeout_ms))
        }
    }
}

/// The replica timeout: a literal is at least 1 ms (`WAIT 0` blocks
/// forever) and shorter than a literal ttl (the lock could expire while
/// waiting); the runtime checks the rest.
fn replica_timeout(value: &Expr, ttl_ms: Option<u64>) -> syn::Result<Setting<u64>> {
    let (timeout, span) = setting::duration(value, REPLICA_TIMEOUT)?;
    let Setting::Fixed(timeout_ms) = timeout else {
        return Ok(timeout);
    };
    if timeout_ms == 0 {
        let message = format!(
            "`{REPLICA_TIMEOUT}` must be at least 1ms: Redis `WAIT` with 0 would block forever"
        );
        return Err(syn::Error::new(span, message));
    }
    match ttl_ms {
        Some(ttl_ms) if timeout_ms >= ttl_ms => {
            let message = format!(
                "`{REPLICA_TIMEOUT}` ({timeout_ms}ms) must be shorter than `{TTL}` ({ttl_ms}ms): \
                 the lock could expire while waiting for replicas"
            );
            Err(syn::Error::new(span, message))
        }
        _ => Ok(timeout),
    }
}

/// A whole number of replicas, at least 1, or a `u32` expression.
fn replica_count(value: &Expr) -> syn::Result<Setting<u32>> {
    let expected = format!(
        "`{MIN_REPLICAS}` takes a whole number of replicas, at least 1, e.g. `{MIN_REPLICAS} = 1`, or a `u32` expression"
    );
    match setting::count(value, &expected)? {
        Setting::Fixed(0) => Err(syn::Error::new_spanned(value, expected)),
        count => Ok(count),
    }
}

/// `permits = N`: a whole number of permits, at least 1, or a `u32` expression.
fn permit_count(value: &Expr, option: &str) -> syn::Result<Setting<u32>> {
    let expected = format!(
        "`{option}` takes a whole number of holders allowed at once, at least 1, e.g. `{option} = 8`, or a `u32` expression such as `{option} = self.limits.{option}`"
    );
    match setting::count(value, &expected)? {
        Setting::Fixed(0) => {
            let message =
                format!("`{option}` must be at least 1: a semaphore of 0 permits admits nobody");
            Err(syn::Error::new_spanned(value, message))
        }
        count => Ok(count),
    }
}

/// `ttl`: a duration, not zero if written as a literal.
fn lease(value: &Expr, option: &str) -> syn::Result<(Setting<u64>, Span)> {
    let (ttl, span) = setting::duration(value, option)?;
    if let Setting::Fixed(0) = ttl {
        let message = format!(
            "`{TTL}` must be greater than zero: the lease would expire before the body runs"
        );
        return Err(syn::Error::new(span, message));
    }
    Ok((ttl, span))
}

/// `keys = ["a:{x}", "b:{y}"]`: an array of one or more string literals.
fn key_list(value: &Expr) -> syn::Result<Vec<LitStr>> {
    let example = format!(r#"e.g. `{KEYS} = ["account:{{from.id}}", "account:{{to.id}}"]`"#);
    let Expr::Array(array) = value else {
        let message = format!("`{KEYS}` takes an array of string literals, {example}");
        return Err(syn::Error::new_spanned(value, message));
    };
    if array.elems.is_empty() {
        let message = format!("`{KEYS}` needs at least one key, {example}");
        return Err(syn::Error::new_spanned(value, message));
    }
    array
        .elems
        .iter()
        .map(|elem| match elem {
            Expr::Lit(ExprLit {
                lit: Lit::Str(key), ..
            }) => Ok(key.clone()),
            _ => {
                let message = format!("each key in `{KEYS}` is a string literal, {example}");
                Err(syn::Error::new_spanned(elem, message))
            }
        })
        .collect()
}

/// `"wait"` or `"skip"`, with the span of the literal.
fn on_busy(value: &Expr, option: &str) -> syn::Result<(OnBusy, Span)> {
    let text = args::string(value, option, r#""skip""#)?;
    match text.value().as_str() {
        "wait" => Ok((OnBusy::Wait, text.span())),
        "skip" => Ok((OnBusy::Skip, text.span())),
        _ => {
            let message = format!(
                r#"`{option}` takes "skip" (return at once without running the body: `Ok(())` or `Ok(None)`) or "wait" (wait up to `wait`, then fail)"#
            );
            Err(syn::Error::new(text.span(), message))
        }
    }
}

/// `hold_at_least`: a duration, above zero and at most 365 days if written
/// as a literal.
fn hold(value: &Expr, option: &str) -> syn::Result<Setting<u64>> {
    let (hold, span) = setting::duration(value, option)?;
    let Setting::Fixed(ms) = hold else {
        return Ok(hold);
    };
    if ms == 0 {
        let message =
            format!("`{option}` must be greater than zero (leave it out to release at once)");
        return Err(syn::Error::new(span, message));
    }
    if ms > MAX_HOLD_MS {
        let message = format!("`{option}` must be at most 365 days, the longest lease");
        return Err(syn::Error::new(span, message));
    }
    Ok(hold)
}

/// `period`: a duration literal in whole seconds, from 1 s to half a year.
fn period(value: &Expr, option: &str) -> syn::Result<u64> {
    let (period, span) = setting::duration(value, option)?;
    let Setting::Fixed(ms) = period else {
        let message = format!("`{option}` takes a duration literal such as `{option} = \"1h\"`");
        return Err(syn::Error::new(span, message));
    };
    if ms < 1_000 || ms % 1_000 != 0 || ms > MAX_PERIOD_MS {
        let message =
            format!("`{option}` must be whole seconds, at least 1 s and at most half a year");
        return Err(syn::Error::new(span, message));
    }
    Ok(ms)
}

/// `"read"` or `"write"`, with the span of the literal.
fn mode(value: &Expr, option: &str) -> syn::Result<(Mode, Span)> {
    let text = args::string(value, option, r#""read""#)?;
    match text.value().as_str() {
        "read" => Ok((Mode::Read, text.span())),
        "write" => Ok((Mode::Write, text.span())),
        other => {
            let message = format!(
                r#"unknown `{option}` {other:?}: `{option}` takes "read" (many readers at once, no writer) or "write" (one writer, no reader)"#
            );
            Err(syn::Error::new(text.span(), message))
        }
    }
}

/// `"cancel"` or `"continue"`.
fn on_lost(value: &Expr, option: &str) -> syn::Result<OnLost> {
    let text = args::string(value, option, r#""cancel""#)?;
    match text.value().as_str() {
        "cancel" => Ok(OnLost::Cancel),
        "continue" => Ok(OnLost::Continue),
        _ => {
            let message = format!(
                r#"`{option}` takes "cancel" (stop the body at its next await) or "continue" (let it finish)"#
            );
            Err(syn::Error::new(text.span(), message))
        }
    }
}
