//! Leader election (`LockManager::leader`, `Leadership::next_term`, `Term`)
//! against a real redis-server, and in memory: one leader at a time, term
//! numbers that only grow, a dead leader replaced within its ttl, resigning
//! that hands over at once, and a lost term that its leader learns of.
//!
//! Each test starts its own server on a free 127.0.0.1 port. Every loop is
//! bounded in count and time.

use crate::support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use leasehold::{LockManager, LockOptions, Term};
use leasehold_testkit::RedisServer;
use support::{
    assert_lease_lost, connect, fixed_lease, is_free, join_within, long, poll_async, within,
    Harness, NO_HANG,
};

/// The key every test campaigns for.
const KEY: &str = "svc:orders";

/// How long the instances of the rotation tests campaign and lead.
const ROTATION: Duration = Duration::from_secs(3);
/// The lease of a rotation term: renewed every 200 ms, so the longer terms
/// are renewed once or twice.
const ROTATION_TTL: Duration = Duration::from_millis(600);
/// The longest term of the rotation tests.
const LONGEST_TERM_MS: u64 = 400;
/// Bound on the terms of one rotation instance (about 15 are expected in all).
const MOST_TERMS: usize = 100;

/// One term as its leader saw it: the leader held the lease from `start` to
/// `end` (it checked at `end` that the lease was still valid).
#[derive(Debug, Clone, Copy)]
struct TermSpan {
    number: u64,
    instance: usize,
    start: Instant,
    end: Instant,
}

/// Term lengths from 0 to [`LONGEST_TERM_MS`], pseudo-random (xorshift) and
/// different for each instance, the same on every run.
struct TermLengths(u64);

impl TermLengths {
    fn of_instance(instance: usize) -> TermLengths {
        TermLengths(0x9E37_79B9_7F4A_7C15 ^ (instance as u64 + 1))
    }

    fn next(&mut self) -> Duration {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        Duration::from_millis(self.0 % (LONGEST_TERM_MS + 1))
    }
}

/// Runs each manager of `instances` as one instance for [`ROTATION`]: it
/// campaigns, leads for a pseudo-random time, checks its term was not lost,
/// resigns, and campaigns again; a campaign still waiting at the end is
/// cancelled. Returns every term, by start.
async fn rotate_leadership(instances: Vec<LockManager>) -> Vec<TermSpan> {
    let spans = Arc::new(Mutex::new(Vec::new()));
    let until = Instant::now() + ROTATION;
    let tasks = instances
        .into_iter()
        .enumerate()
        .map(|(instance, locks)| {
            let spans = Arc::clone(&spans);
            tokio::spawn(async move {
                let mut leadership = locks.leader(KEY, LockOptions::new().ttl(ROTATION_TTL));
                let mut lengths = TermLengths::of_instance(instance);
                for _ in 0..MOST_TERMS {
                    // Checked here too: an uncontended campaign in memory is
                    // ready at once, and a timeout never fires then.
                    if Instant::now() >= until {
                        break;
                    }
                    let campaign = tokio::time::timeout_at(until.into(), leadership.next_term());
                    let Ok(term) = campaign.await else {
                        break;
                    };
                    let term = term.expect("campaign");
                    let start = Instant::now();
                    tokio::time::sleep(lengths.next()).await;
                    let end = Instant::now();
                    assert!(
                        !term.is_lost(),
                        "term {} of instance {instance} was lost though nothing failed",
                        term.number()
                    );
                    spans.lock().unwrap().push(TermSpan {
                        number: term.number(),
                        instance,
                        start,
                        end,
                    });
                    term.resign().await.expect("resign a term that is not lost");
                }
            })
        })
        .collect();
    join_within(tasks, ROTATION + NO_HANG, "the rotation's instances").await;
    let mut spans = spans.lock().unwrap().clone();
    spans.sort_by_key(|span| span.start);
    spans
}

/// Asserts that no two of `spans` (sorted by start) overlap, that their
/// numbers strictly increase in that order, and that leadership rotated.
fn assert_one_leader_at_a_time(spans: &[TermSpan]) {
    assert!(
        spans.len() >= 5,
        "only {} terms in {ROTATION:?}: leadership did not rotate",
        spans.len()
    );
    for pair in spans.windows(2) {
        let (earlier, later) = (&pair[0], &pair[1]);
        assert!(
            earlier.end <= later.start,
            "two leaders at once: {earlier:?} was still leading when {later:?} began"
        );
        assert!(
            earlier.number < later.number,
            "term numbers went back: {earlier:?} then {later:?}"
        );
    }
    let mut leaders: Vec<usize> = spans.iter().map(|span| span.instance).collect();
    leaders.sort_unstable();
    leaders.dedup();
    assert!(
        leaders.len() >= 2,
        "only instance {leaders:?} ever led: no hand-over was tested"
    );
}

/// Three instances, each its own connection, resign after terms of up to
/// 400 ms: no two terms overlap, and term numbers grow with every term.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_never_overlap_and_their_numbers_grow_on_redis() {
    let server = RedisServer::start();
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(connect(&server.url()).await);
    }
    assert_one_leader_at_a_time(&rotate_leadership(instances).await);
}

/// The same on the in-memory backend: three clones of one manager.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_never_overlap_and_their_numbers_grow_in_memory() {
    let locks = LockManager::in_memory();
    let spans = rotate_leadership(vec![locks.clone(), locks.clone(), locks]).await;
    assert_one_leader_at_a_time(&spans);
}

/// Campaigns for [`KEY`] on `locks` with `options` in a task; yields the
/// term and when it began.
fn campaign(locks: &LockManager, options: LockOptions) -> tokio::task::JoinHandle<(Term, Instant)> {
    let mut leadership = locks.leader(KEY, options);
    tokio::spawn(async move {
        let term = leadership.next_term().await.expect("campaign");
        (term, Instant::now())
    })
}

/// How soon a waiting campaigner must lead after the leader resigned: far
/// below the 30 s ttl of [`long`], so only the release can explain it.
const AT_ONCE: Duration = Duration::from_secs(1);

/// A resigned term, and a dropped one, hand leadership to the campaigner
/// waiting for it at once, with a greater term number.
async fn resigning_or_dropping_hands_over_at_once(harness: Harness) {
    let first = within(harness.a.leader(KEY, long()).next_term())
        .await
        .expect("the key is free");
    let waiting = campaign(&harness.b, long());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a second leader beside {first:?}");

    let (first_number, resigned) = (first.number(), Instant::now());
    first.resign().await.expect("resign");
    let (second, began) = within(waiting).await.expect("campaign task");
    assert!(
        began - resigned < AT_ONCE,
        "the campaigner led {:?} after the leader resigned",
        began - resigned
    );
    assert!(
        second.number() > first_number,
        "{second:?} after term {first_number}"
    );

    let waiting = campaign(&harness.a, long());
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiting.is_finished(), "a second leader beside {second:?}");
    let (second_number, dropped) = (second.number(), Instant::now());
    drop(second);
    let (third, began) = within(waiting).await.expect("campaign task");
    assert!(
        began - dropped < AT_ONCE,
        "the campaigner led {:?} after the leader's term was dropped",
        began - dropped
    );
    assert!(
        third.number() > second_number,
        "{third:?} after term {second_number}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigning_or_dropping_a_term_hands_over_at_once_on_redis() {
    resigning_or_dropping_hands_over_at_once(Harness::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resigning_or_dropping_a_term_hands_over_at_once_in_memory() {
    resigning_or_dropping_hands_over_at_once(Harness::memory()).await;
}

/// A term's lock is labelled by its key, which is what operators and the
/// metrics' `lock` label see (not `-` and `unlabelled`); a label the caller
/// gave is kept.
async fn terms_are_labelled_by_their_key(harness: Harness) {
    let term = within(harness.a.leader(KEY, long()).next_term())
        .await
        .expect("the key is free");
    let info = harness.b.inspect(KEY).await.expect("inspect");
    let label = info.holder.and_then(|holder| holder.label);
    assert_eq!(label.as_deref(), Some(KEY), "{term:?}");
    term.resign().await.expect("resign");

    let labelled = long().label("orders-leader");
    let term = within(harness.a.leader(KEY, labelled).next_term())
        .await
        .expect("the key is free");
    let info = harness.b.inspect(KEY).await.expect("inspect");
    let label = info.holder.and_then(|holder| holder.label);
    assert_eq!(label.as_deref(), Some("orders-leader"), "{term:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_are_labelled_by_their_key_on_redis() {
    terms_are_labelled_by_their_key(Harness::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn terms_are_labelled_by_their_key_in_memory() {
    terms_are_labelled_by_their_key(Harness::memory()).await;
}

/// A campaign dropped while it waits (here by a timeout) leaves nothing
/// behind: once the leader resigns, the key is free at once, not held for
/// a campaigner that went away.
///
/// The dropped campaign leaves the server's waiter queue from a task it
/// spawns on its own connection, which may reach Redis just after the
/// leader's release (on another manager's connection) handed the lock to
/// the departed campaigner; that task then frees it. So the key must be free
/// within [`AT_ONCE`], half the single server's 2 s grant window: without
/// the cancelled campaign's undo only the window's end would free it.
async fn cancelled_campaign_leaves_no_lock_behind(harness: Harness) {
    let leader = within(harness.a.leader(KEY, long()).next_term())
        .await
        .expect("the key is free");
    let mut rival = harness.b.leader(KEY, long());
    let gave_up = tokio::time::timeout(Duration::from_millis(300), rival.next_term()).await;
    assert!(gave_up.is_err(), "the rival led beside {leader:?}");

    leader.resign().await.expect("resign");
    assert!(
        poll_async(AT_ONCE, || is_free(&harness.b, KEY)).await,
        "the key stayed held {AT_ONCE:?} after its leader resigned: the cancelled campaign kept a claim on it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_campaign_leaves_no_lock_behind_on_redis() {
    cancelled_campaign_leaves_no_lock_behind(Harness::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancelled_campaign_leaves_no_lock_behind_in_memory() {
    cancelled_campaign_leaves_no_lock_behind(Harness::memory()).await;
}

/// The lease of the lost-leadership tests: renewed every 667 ms, and long
/// enough that its safety margin (6 %, 122 ms) stays above the scheduling
/// delays of a machine with every core busy (at 600 ms, a term on such a
/// machine was told 64 ms after its validity ended).
const SHORT_TTL: Duration = Duration::from_secs(2);

/// A leader whose lock vanishes from Redis (deleted here; an operator's
/// `DEL`, a failover to a replica that never had it) learns that it lost at
/// the next renewal, within one ttl: `lost()` resolves, `is_lost()` says so,
/// and resigning reports the loss rather than touching the lock. Until then
/// renewal kept it leading past its ttl; the next leader's number is greater.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leader_whose_lock_is_deleted_learns_it_lost() {
    let harness = Harness::redis().await;
    let term = within(
        harness
            .a
            .leader(KEY, LockOptions::new().ttl(SHORT_TTL))
            .next_term(),
    )
    .await
    .expect("the key is free");
    tokio::time::sleep(SHORT_TTL * 3 / 2).await;
    assert!(
        !term.is_lost(),
        "renewal did not keep {term:?} past its ttl"
    );

    let deleted = Instant::now();
    harness
        .server()
        .command(&["DEL", &format!("lock:{KEY}")])
        .expect("DEL the lock key");
    within(term.lost()).await;
    assert!(
        deleted.elapsed() <= SHORT_TTL,
        "the leader learned of its loss {:?} after its lock was deleted",
        deleted.elapsed()
    );
    assert!(term.is_lost());
    let number = term.number();
    assert_lease_lost(term.resign().await, KEY);

    let next = within(harness.b.leader(KEY, long()).next_term())
        .await
        .expect("the key is free");
    assert!(next.number() > number, "{next:?} after term {number}");
}

/// In memory, a term without renewal ends with its one lease: `lost()`
/// resolves within the ttl, and another instance leads next.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unrenewed_term_is_lost_within_its_ttl_in_memory() {
    let harness = Harness::memory();
    let began = Instant::now();
    let term = within(harness.a.leader(KEY, fixed_lease(SHORT_TTL)).next_term())
        .await
        .expect("the key is free");
    assert!(!term.is_lost());
    within(term.lost()).await;
    assert!(
        began.elapsed() <= SHORT_TTL,
        "an unrenewed term outlived its ttl: lost after {:?}",
        began.elapsed()
    );
    let next = within(harness.b.leader(KEY, long()).next_term())
        .await
        .expect("the key is free once the lease ran out");
    assert!(next.number() > term.number(), "{next:?} after {term:?}");
}

/// A watched leadership shows its term while it lasts and `None` once it is
/// lost, before its lease's validity ends (here an unrenewed lease, as a
/// leader cut off from Redis has), while the next leader (queued first, so
/// handed the key) leads; dropping the watch ends its campaign and still
/// shows `None`.
async fn watched_leadership_shows_a_term_only_while_it_is_valid(harness: Harness) {
    let began = Instant::now();
    let watch = harness.a.leader(KEY, fixed_lease(SHORT_TTL)).watch();
    let mut current = watch.receiver();
    let first = within(current.wait_for(Option::is_some))
        .await
        .map(|term| *term)
        .expect("the campaign runs");
    assert_eq!(watch.current(), first);
    let next = campaign(&harness.b, long());
    within(current.wait_for(|term| *term != first))
        .await
        .expect("the campaign runs");
    assert!(
        began.elapsed() <= SHORT_TTL,
        "term {first:?} was shown {:?} after its campaign began, past its unrenewed lease",
        began.elapsed()
    );
    let (next, _) = within(next).await.expect("campaign task");
    assert_eq!(
        *current.borrow(),
        None,
        "shown as leading while {next:?} leads"
    );
    drop(watch);
    within(current.wait_for(Option::is_none))
        .await
        .expect("`None` is shown when the campaign ends");
    assert!(!next.is_lost());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_leadership_shows_a_term_only_while_it_is_valid_on_redis() {
    watched_leadership_shows_a_term_only_while_it_is_valid(Harness::redis().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watched_leadership_shows_a_term_only_while_it_is_valid_in_memory() {
    watched_leadership_shows_a_term_only_while_it_is_valid(Harness::memory()).await;
}

/// The lease of the leader that is killed below.
const DYING_TTL: Duration = Duration::from_secs(1);
/// Scheduling allowance on top of a bound that the lease alone sets.
const ALLOWANCE: Duration = Duration::from_millis(250);
/// What the leader process prints, followed by its term number, once it leads.
const LEADS: &str = "leader of term ";

/// The leader process of the test below: leads [`KEY`] with a lease of
/// [`DYING_TTL`], prints its term number, and leads until it is killed.
/// Run only as a child process.
#[tokio::test]
#[ignore = "a child process of `killed_leader_is_replaced_within_its_ttl_by_a_greater_term`"]
async fn leader_process() {
    let Ok(url) = std::env::var("LEADER_CHILD_URL") else {
        return;
    };
    let locks = LockManager::connect(&url).await.expect("connect");
    let term = locks
        .leader(KEY, LockOptions::new().ttl(DYING_TTL))
        .next_term()
        .await
        .expect("campaign");
    println!("{LEADS}{}", term.number());
    tokio::time::sleep(Duration::from_secs(60)).await;
}

/// The process running [`leader_process`]; killed when dropped, so a
/// failing test leaves no leader behind.
struct LeaderProcess(Child);

impl LeaderProcess {
    fn start(url: &str) -> LeaderProcess {
        let child = Command::new(std::env::current_exe().expect("the test binary"))
            .args([
                "--exact",
                "leader::leader_process",
                "--ignored",
                "--nocapture",
                "--quiet",
            ])
            .env("LEADER_CHILD_URL", url)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("start the leader process");
        LeaderProcess(child)
    }

    /// The term number the process prints once it leads; panics if it
    /// exits first (or does not lead within [`NO_HANG`]).
    async fn term_number(&mut self) -> u64 {
        let stdout = self.0.stdout.take().expect("the leader's stdout");
        let read = tokio::task::spawn_blocking(move || {
            BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
                .find_map(|line| line.strip_prefix(LEADS).map(str::to_owned))
        });
        let number = within(read).await.expect("reader task");
        number
            .expect("the leader process exited without leading")
            .parse()
            .expect("a term number")
    }

    fn kill(&mut self) {
        self.0.kill().expect("SIGKILL the leader");
        self.0.wait().expect("reap it");
    }
}

impl Drop for LeaderProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A leader killed with SIGKILL (no release, no last renewal) is replaced
/// by a waiting campaigner within ttl + ttl/3 (its last renewal may have
/// run up to ttl/3 before the kill) plus a scheduling allowance, with a
/// greater term number. Until the kill, the live leader kept leading past
/// its ttl and the campaigner waited.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_leader_is_replaced_within_its_ttl_by_a_greater_term() {
    let server = RedisServer::start();
    let mut leader = LeaderProcess::start(&server.url());
    let dead_number = leader.term_number().await;

    let locks = connect(&server.url()).await;
    let waiting = campaign(&locks, LockOptions::new().ttl(DYING_TTL));
    tokio::time::sleep(DYING_TTL * 3 / 2).await;
    assert!(
        !waiting.is_finished(),
        "a second leader while term {dead_number} was alive and renewed"
    );

    let killed = Instant::now();
    leader.kill();
    let (term, began) = within(waiting).await.expect("campaign task");
    let waited = began - killed;
    let bound = DYING_TTL + DYING_TTL / 3 + ALLOWANCE;
    assert!(
        waited <= bound,
        "a new leader only {waited:?} after the leader was killed (bound {bound:?})"
    );
    assert!(
        term.number() > dead_number,
        "{term:?} after the dead leader's term {dead_number}"
    );
}
