//! The least-privilege Redis ACL of a service, as the guide's "Least
//! privilege" section documents it, and managers that log in as a user
//! granted exactly that.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use leasehold::LockManager;
use leasehold_testkit::{RedisCluster, RedisServer};

/// Every command a lock service sends, on its own or from the lock scripts
/// (word for word the guide's ACL line).
pub const SERVICE_COMMANDS: &str = "+set +evalsha +script|load +publish +spublish +subscribe +ssubscribe +unsubscribe +sunsubscribe +ping +wait +role +info +cluster|slots +get +del +exists +pexpire +pexpireat +pttl +time +zadd +zcard +zcount +zrange +zrangebyscore +zrem +zremrangebyscore +zscore +hset +hget +hdel";

/// The password of the least-privilege users.
pub const ACL_PASSWORD: &str = "least-privilege-pw";

/// Users handed out on the shared cluster so far.
static USERS: AtomicUsize = AtomicUsize::new(0);

/// The rules of a service with namespace `base` (without its `:`): its
/// keys and channels, `base:*` and `base-*`, each behind a hash tag on a
/// cluster (`{*}base:*`), and [`SERVICE_COMMANDS`].
pub fn service_rules(base: &str, cluster: bool) -> Vec<String> {
    let tag = if cluster { "{*}" } else { "" };
    let mut rules = vec!["resetchannels".to_owned(), "-@all".to_owned()];
    for kind in ['~', '&'] {
        for separator in [':', '-'] {
            rules.push(format!("{kind}{tag}{base}{separator}*"));
        }
    }
    rules.extend(SERVICE_COMMANDS.split(' ').map(str::to_owned));
    rules
}

/// A server whose user `svc` has the service ACL of the default namespace
/// `lock:`.
pub fn acl_server() -> RedisServer {
    let rules = service_rules("lock", false);
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    RedisServer::builder()
        .acl_user("svc", ACL_PASSWORD, &rules)
        .start()
}

/// A fresh user on every node of `cluster` with the service ACL of a fresh
/// namespace: the user's name, which is also the namespace's base.
pub fn cluster_acl_user(cluster: &RedisCluster) -> String {
    let user = format!("acl-svc-{}", USERS.fetch_add(1, Ordering::Relaxed));
    let rules = service_rules(&user, true);
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    cluster.set_acl_user(&user, ACL_PASSWORD, &rules);
    user
}

/// A manager on `cluster` logged in as `user` (see [`cluster_acl_user`]),
/// keys under its namespace, with 500 ms connect and response timeouts.
pub async fn cluster_acl_manager(cluster: &RedisCluster, user: &str) -> LockManager {
    LockManager::builder()
        .namespace(user)
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(500))
        .cluster(cluster.seed_urls_as(user, ACL_PASSWORD))
        .await
        .unwrap_or_else(|err| panic!("cannot connect to the cluster as {user}: {err}"))
}
