//! What `#[distributed_lock]` hands to the runtime, and how the rewritten
//! body behaves, without Redis: every function here uses `crate = shim`, a
//! stand-in for `leasehold` that records each call of
//! `__private::locked` and then runs (or, when told the lock is busy, skips)
//! the body. `expansion_contract!` checks at compile time that the shim and
//! the real crate provide the items the expansion names, with the same
//! signatures.

use std::cell::Cell;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use leasehold::distributed_lock;

/// Compiles only while `$krate` provides every item the expansion names, as
/// the expansion uses it: applied to the real crate and to the shim, it keeps
/// the shim's signatures those of the runtime.
macro_rules! expansion_contract {
    ($krate:ident) => {
        const _: () = {
            use std::future::Future;
            use std::time::Duration;

            use $krate::{LockError, LockManager, LockOptions, OnLost};

            let _: fn(&LockManager) -> LockManager = <LockManager as Clone>::clone;
            let _: fn() -> LockOptions = LockOptions::new;
            let _: fn(LockOptions, Duration) -> LockOptions = LockOptions::ttl;
            let _: fn(LockOptions, Duration) -> LockOptions = LockOptions::wait;
            let _: fn(LockOptions, bool) -> LockOptions = LockOptions::renew;
            let _: fn(LockOptions, bool) -> LockOptions = LockOptions::reentrant;
            let _: fn(LockOptions, OnLost) -> LockOptions = LockOptions::on_lost;
            let _: fn(LockOptions, u32, Duration) -> LockOptions = LockOptions::min_replicas;
            let _: fn(LockOptions, u32) -> LockOptions = LockOptions::min_replicas_default_timeout;
            let _: [OnLost; 2] = [OnLost::Cancel, OnLost::Continue];

            /// The call the expansion makes: manager, key, options and body
            /// in, the body's result (or the lock's error) out.
            #[allow(dead_code)]
            fn locked<F, T, E>(
                manager: Option<LockManager>,
                key: String,
                options: LockOptions,
                body: F,
            ) -> impl Future<Output = Result<T, E>>
            where
                F: Future<Output = Result<T, E>>,
                E: From<LockError>,
            {
                $krate::__private::locked::<$krate::__private::Wait, _, _, _>(
                    manager,
                    $krate::__private::Target::Lock(key),
                    options,
                    body,
                )
            }
        };
    };
}

expansion_contract!(leasehold);
expansion_contract!(shim);

/// Stands in for the `leasehold` crate, with the items the expansion
/// names.
mod shim {
    use std::cell::RefCell;
    use std::future::Future;
    use std::time::Duration;

    /// A manager told apart by its name.
    #[derive(Clone, Debug, PartialEq)]
    pub struct LockManager(pub &'static str);

    /// Records each setter the expansion calls; `None` if it did not call it.
    #[derive(Debug, Default, PartialEq)]
    pub struct LockOptions {
        pub ttl: Option<Duration>,
        pub wait: Option<Duration>,
        pub renew: Option<bool>,
        pub reentrant: Option<bool>,
        pub on_lost: Option<OnLost>,
        /// Replicas and timeout; `None`: the runtime's default timeout.
        pub min_replicas: Option<(u32, Option<Duration>)>,
        /// What the lock records as its label.
        pub label: Option<String>,
        /// The key template, the metrics' label.
        pub template: Option<&'static str>,
    }

    impl LockOptions {
        pub fn new() -> Self {
            LockOptions::default()
        }
        pub fn ttl(self, ttl: Duration) -> Self {
            LockOptions {
                ttl: Some(ttl),
                ..self
            }
        }
        pub fn wait(self, wait: Duration) -> Self {
            LockOptions {
                wait: Some(wait),
                ..self
            }
        }
        pub fn renew(self, renew: bool) -> Self {
            LockOptions {
                renew: Some(renew),
                ..self
            }
        }
        pub fn reentrant(self, reentrant: bool) -> Self {
            LockOptions {
                reentrant: Some(reentrant),
                ..self
            }
        }
        pub fn on_lost(self, on_lost: OnLost) -> Self {
            LockOptions {
                on_lost: Some(on_lost),
                ..self
            }
        }
        pub fn min_replicas(self, replicas: u32, timeout: Duration) -> Self {
            LockOptions {
                min_replicas: Some((replicas, Some(timeout))),
                ..self
            }
        }
        pub fn key_template(self, template: &'static str) -> Self {
            LockOptions {
                template: Some(template),
                ..self
            }
        }
        pub fn label(self, label: impl Into<String>) -> Self {
            LockOptions {
                label: Some(label.into()),
                ..self
            }
        }
        pub fn min_replicas_default_timeout(self, replicas: u32) -> Self {
            LockOptions {
                min_replicas: Some((replicas, None)),
                ..self
            }
        }
    }

    #[derive(Clone, Copy, Debug, PartialEq)]
    pub enum OnLost {
        Cancel,
        Continue,
    }

    /// What the shim's `locked` returns when the lock is busy.
    #[derive(Debug, PartialEq)]
    pub struct LockError(pub String);

    /// One call of `locked`, as the expansion made it.
    #[derive(Debug, PartialEq)]
    pub struct Call {
        pub manager: Option<LockManager>,
        pub key: String,
        pub options: LockOptions,
    }

    thread_local! {
        static CALLS: RefCell<Vec<Call>> = const { RefCell::new(Vec::new()) };
        static EVENTS: RefCell<Vec<String>> = const { RefCell::new(Vec::new()) };
        static BUSY: RefCell<bool> = const { RefCell::new(false) };
    }

    /// Notes that something happened, in order with acquire and release.
    pub fn event(what: impl Into<String>) {
        EVENTS.with(|events| events.borrow_mut().push(what.into()));
    }

    /// The events so far on this thread, emptied.
    pub fn take_events() -> Vec<String> {
        EVENTS.with(|events| events.take())
    }

    /// The calls of `locked` so far on this thread, emptied.
    pub fn take_calls() -> Vec<Call> {
        CALLS.with(|calls| calls.take())
    }

    /// The only call of `locked` so far on this thread.
    pub fn only_call() -> Call {
        let mut calls = take_calls();
        assert_eq!(calls.len(), 1, "{calls:?}");
        calls.remove(0)
    }

    /// Makes the next acquisitions on this thread fail as if the lock were held.
    pub fn set_busy(busy: bool) {
        BUSY.with(|flag| *flag.borrow_mut() = busy);
    }

    pub mod __private {
        use super::*;

        crate::support::shim_private_items!();

        pub async fn locked<B, F, T, E>(
            manager: Option<LockManager>,
            target: Target,
            options: LockOptions,
            body: F,
        ) -> Result<T, E>
        where
            B: OnBusy<T>,
            F: Future<Output = Result<T, E>>,
            E: From<LockError>,
        {
            let Target::Lock(key) = target;
            event(format!("acquire {key}"));
            CALLS.with(|calls| {
                calls.borrow_mut().push(Call {
                    manager,
                    key: key.clone(),
                    options,
                })
            });
            if BUSY.with(|busy| *busy.borrow()) {
                return Err(LockError(format!("{key} is busy")).into());
            }
            let result = body.await;
            event(format!("release {key}"));
            result
        }
    }
}

use shim::{event, only_call, take_calls, take_events, LockError, LockManager, OnLost};

#[derive(Debug, PartialEq)]
enum AppError {
    Lock(LockError),
    Invalid(String),
}

impl From<LockError> for AppError {
    fn from(error: LockError) -> Self {
        AppError::Lock(error)
    }
}

impl From<std::num::ParseIntError> for AppError {
    fn from(error: std::num::ParseIntError) -> Self {
        AppError::Invalid(error.to_string())
    }
}

struct Order {
    id: u64,
    customer: Customer,
    pair: (u8, &'static str),
}

struct Customer {
    name: &'static str,
}

fn order() -> Order {
    Order {
        id: 42,
        customer: Customer { name: "ann" },
        pair: (7, "seven"),
    }
}

#[distributed_lock(crate = shim, key = "order:{order.id}:{user_id}")]
async fn pay(order: &Order, user_id: u64) -> Result<u64, AppError> {
    event("body");
    Ok(order.id + user_id)
}

#[tokio::test]
async fn key_is_built_from_parameters_and_fields() {
    assert_eq!(pay(&order(), 7).await, Ok(49));
    let call = only_call();
    assert_eq!(call.key, "order:42:7");
    assert_eq!(
        call.options.template,
        Some("order:{order.id}:{user_id}"),
        "the metrics' label is the template, not the key"
    );
}

#[distributed_lock(crate = shim, key = "{order.customer.name}/{order.pair.0}/{order.pair.1}")]
async fn nested(order: &Order) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn nested_fields_and_tuple_indices() {
    nested(&order()).await.unwrap();
    assert_eq!(only_call().key, "ann/7/seven");
}

#[distributed_lock(crate = shim, key = "item:{r#type}:{match}")]
async fn raw_names(r#type: &str, r#match: u32) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn raw_identifiers_are_placeholders_written_either_way() {
    raw_names("book", 7).await.unwrap();
    assert_eq!(only_call().key, "item:book:7");
}

#[distributed_lock(crate = shim, key = "{{literal}}:{id}:}}{{")]
async fn escaped(id: u32) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn doubled_braces_are_literal_braces() {
    escaped(5).await.unwrap();
    assert_eq!(only_call().key, "{literal}:5:}{");
}

/// Counts how often it is formatted.
struct Counted<'a>(&'a Cell<u32>);

impl fmt::Display for Counted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.set(self.0.get() + 1);
        event("key formatted");
        write!(f, "counted")
    }
}

#[distributed_lock(crate = shim, key = "c:{value}")]
async fn format_once(value: Counted<'_>) -> Result<(), AppError> {
    event("body");
    Ok(())
}

#[tokio::test]
async fn key_is_formatted_once_before_acquiring() {
    let count = Cell::new(0);
    format_once(Counted(&count)).await.unwrap();
    assert_eq!(count.get(), 1);
    assert_eq!(
        take_events(),
        [
            "key formatted",
            "acquire c:counted",
            "body",
            "release c:counted"
        ]
    );
}

#[tokio::test]
async fn nothing_runs_until_the_call_is_awaited() {
    let count = Cell::new(0);
    let call = format_once(Counted(&count));
    assert_eq!(count.get(), 0);
    assert!(take_events().is_empty());
    call.await.unwrap();
    assert_eq!(count.get(), 1);
}

#[distributed_lock(crate = shim, key = "defaults")]
async fn defaults() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn options_not_written_are_left_to_the_runtimes_defaults() {
    defaults().await.unwrap();
    let call = only_call();
    assert_eq!(call.manager, None, "no manager: the installed one");
    assert_eq!(
        call.options,
        shim::LockOptions {
            label: Some("suite::macro_expansion::defaults".to_owned()),
            template: Some("defaults"),
            ..shim::LockOptions::default()
        },
        "no setter called but the label: the function's path"
    );
}

#[distributed_lock(crate = shim, key = "some", wait = "2s", reentrant = false)]
async fn some_options() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn only_the_options_written_reach_the_runtime() {
    some_options().await.unwrap();
    assert_eq!(
        only_call().options,
        shim::LockOptions {
            wait: Some(Duration::from_secs(2)),
            reentrant: Some(false),
            label: Some("suite::macro_expansion::some_options".to_owned()),
            template: Some("some"),
            ..shim::LockOptions::default()
        }
    );
}

#[distributed_lock(crate = shim, key = "replicated", min_replicas = 2)]
async fn replicated() -> Result<(), AppError> {
    Ok(())
}

#[distributed_lock(crate = shim, key = "replicated", ttl = "300ms", min_replicas = 1)]
async fn replicated_short_ttl() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn min_replicas_without_timeout_leaves_the_timeout_to_the_runtime() {
    replicated().await.unwrap();
    assert_eq!(only_call().options.min_replicas, Some((2, None)));
    replicated_short_ttl().await.unwrap();
    let options = only_call().options;
    assert_eq!(options.min_replicas, Some((1, None)));
    assert_eq!(options.ttl, Some(Duration::from_millis(300)));
}

#[distributed_lock(
    crate = shim,
    key = "all",
    ttl = "1m30s",
    wait = "250ms",
    renew = false,
    reentrant = false,
    on_lost = "continue",
    min_replicas = 1,
    replica_timeout = "50ms",
)]
async fn every_option() -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn every_option_reaches_the_runtime() {
    every_option().await.unwrap();
    assert_eq!(
        only_call().options,
        shim::LockOptions {
            ttl: Some(Duration::from_secs(90)),
            wait: Some(Duration::from_millis(250)),
            renew: Some(false),
            reentrant: Some(false),
            on_lost: Some(OnLost::Continue),
            min_replicas: Some((1, Some(Duration::from_millis(50)))),
            label: Some("suite::macro_expansion::every_option".to_owned()),
            template: Some("all"),
        }
    );
}

#[distributed_lock(crate = shim, key = "parse:{text}")]
async fn parse(text: &str) -> Result<u32, AppError> {
    let number: u32 = text.parse()?;
    if number == 0 {
        return Err(AppError::Invalid("zero".to_owned()));
    }
    event("body finished");
    Ok(number)
}

#[tokio::test]
async fn question_mark_leaves_only_the_body() {
    assert!(matches!(parse("x").await, Err(AppError::Invalid(_))));
    assert_eq!(take_events(), ["acquire parse:x", "release parse:x"]);
}

#[tokio::test]
async fn return_leaves_only_the_body() {
    assert_eq!(parse("0").await, Err(AppError::Invalid("zero".to_owned())));
    assert_eq!(take_events(), ["acquire parse:0", "release parse:0"]);
}

#[tokio::test]
async fn value_of_the_body_is_returned() {
    assert_eq!(parse("12").await, Ok(12));
    assert_eq!(
        take_events(),
        ["acquire parse:12", "body finished", "release parse:12"]
    );
}

#[tokio::test]
async fn lock_error_is_converted_into_the_functions_error_and_body_is_skipped() {
    shim::set_busy(true);
    let result = parse("12").await;
    shim::set_busy(false);
    assert_eq!(
        result,
        Err(AppError::Lock(LockError("parse:12 is busy".to_owned())))
    );
    assert_eq!(take_events(), ["acquire parse:12"]);
}

#[distributed_lock(crate = shim, key = "io:{name}")]
async fn io_alias(name: &str) -> std::io::Result<usize> {
    Ok(name.len())
}

impl From<LockError> for std::io::Error {
    fn from(error: LockError) -> Self {
        std::io::Error::other(error.0)
    }
}

#[tokio::test]
async fn result_aliases_work() {
    assert_eq!(io_alias("abc").await.unwrap(), 3);
    shim::set_busy(true);
    let error = io_alias("abc").await.unwrap_err();
    shim::set_busy(false);
    assert_eq!(error.to_string(), "io:abc is busy");
    take_calls();
}

struct Account {
    id: u64,
    balance: u64,
    locks: LockManager,
    shared: Arc<LockManager>,
}

impl Account {
    fn new() -> Self {
        Account {
            id: 1,
            balance: 10,
            locks: LockManager("own"),
            shared: Arc::new(LockManager("shared")),
        }
    }

    #[distributed_lock(crate = shim, key = "account:{self.id}", manager = self.locks)]
    async fn balance(&self) -> Result<u64, AppError> {
        Ok(self.balance)
    }

    #[distributed_lock(crate = shim, key = "account:{self.id}:{self.balance}+{amount}")]
    async fn deposit(&mut self, amount: u64) -> Result<u64, AppError> {
        self.balance += amount;
        Ok(self.balance)
    }

    #[distributed_lock(crate = shim, key = "account:{self.id}", manager = self.shared)]
    async fn close(self) -> Result<u64, AppError> {
        Ok(self.balance)
    }

    #[distributed_lock(crate = shim, key = "account:{self.id}")]
    async fn shared(self: Arc<Self>) -> Result<u64, AppError> {
        Ok(self.balance)
    }
}

#[tokio::test]
async fn methods_lock_on_self_fields_with_every_receiver() {
    let mut account = Account::new();
    assert_eq!(account.balance().await, Ok(10));
    assert_eq!(account.deposit(5).await, Ok(15));
    assert_eq!(account.close().await, Ok(15));
    assert_eq!(Arc::new(Account::new()).shared().await, Ok(10));
    let calls: Vec<_> = take_calls()
        .into_iter()
        .map(|call| (call.key, call.manager))
        .collect();
    assert_eq!(
        calls,
        [
            ("account:1".to_owned(), Some(LockManager("own"))),
            ("account:1:10+5".to_owned(), None),
            ("account:1".to_owned(), Some(LockManager("shared"))),
            ("account:1".to_owned(), None),
        ]
    );
}

/// A method's label names its type, as operators read it (`dlock show`):
/// `…::Account::balance`, not only the module's `…::balance`.
#[tokio::test]
async fn methods_are_labelled_with_their_type() {
    Account::new().balance().await.unwrap();
    Arc::new(Account::new()).shared().await.unwrap();
    let labels: Vec<_> = take_calls()
        .into_iter()
        .map(|call| call.options.label)
        .collect();
    assert_eq!(
        labels,
        [
            Some("suite::macro_expansion::Account::balance".to_owned()),
            Some("suite::macro_expansion::Account::shared".to_owned()),
        ]
    );
}

#[distributed_lock(crate = shim, key = "borrowed", manager = manager)]
async fn borrowed_manager(manager: &LockManager) -> Result<(), AppError> {
    Ok(())
}

#[tokio::test]
async fn manager_may_be_a_reference() {
    borrowed_manager(&LockManager("borrowed")).await.unwrap();
    assert_eq!(only_call().manager, Some(LockManager("borrowed")));
}

#[distributed_lock(crate = shim, key = "generic:{key}:{label}")]
async fn generic<'a, K>(key: &'a K, label: impl fmt::Display) -> Result<&'a K, AppError>
where
    K: fmt::Display + ?Sized,
{
    Ok(key)
}

#[tokio::test]
async fn generic_functions_and_impl_trait_arguments() {
    assert_eq!(generic("k", 3).await, Ok("k"));
    assert_eq!(only_call().key, "generic:k:3");
}

/// Names the expansion uses for its own locals, taken by the user.
#[distributed_lock(crate = shim, key = "{__leasehold_key}:{__leasehold_manager}")]
async fn hygiene(__leasehold_key: u32, __leasehold_manager: &str) -> Result<String, AppError> {
    let __leasehold_return = "mine";
    Ok(format!(
        "{__leasehold_key}{__leasehold_manager}{__leasehold_return}"
    ))
}

#[tokio::test]
async fn generated_names_do_not_clash_with_the_users() {
    assert_eq!(hygiene(1, "two").await, Ok("1twomine".to_owned()));
    assert_eq!(only_call().key, "1:two");
}

/// Inner attributes stay on the function's body.
#[distributed_lock(crate = shim, key = "inner")]
async fn inner_attributes() -> Result<u32, AppError> {
    #![allow(unused_variables)]
    let unused = ();
    Ok(3)
}

#[tokio::test]
async fn inner_attributes_are_kept() {
    assert_eq!(inner_attributes().await, Ok(3));
    take_calls();
}

#[tokio::test]
async fn rewritten_futures_stay_send() {
    fn spawnable<F: std::future::Future + Send>(future: F) -> F {
        future
    }
    let order = order();
    spawnable(pay(&order, 1)).await.unwrap();
    spawnable(Account::new().close()).await.unwrap();
    take_calls();
}
