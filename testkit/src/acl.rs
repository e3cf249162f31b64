//! Redis ACL users for least-privilege tests: a server started with one, or
//! one added to every node of a running cluster, and URLs that log in as it.
//!
//! The default user stays as it was (no password, every permission), so
//! [`RedisServer::command`] keeps working as the test's administrator.

use crate::{RedisCluster, RedisServer, RedisServerBuilder};

impl RedisServerBuilder {
    /// Starts the server with the ACL user `user`, enabled, logging in with
    /// `password` and granted exactly `rules` (e.g. `~lock*`, `+get`): what
    /// `ACL SETUSER user on >password rules…` would make, kept across
    /// [`RedisServer::restart_empty`] as it is part of the server's options.
    pub fn acl_user(self, user: &str, password: &str, rules: &[&str]) -> Self {
        let head = ["--user", user, "on"].map(str::to_owned);
        head.into_iter()
            .chain([format!(">{password}")])
            .chain(rules.iter().map(|rule| (*rule).to_owned()))
            .fold(self, RedisServerBuilder::arg)
    }
}

impl RedisServer {
    /// `redis://user:password@127.0.0.1:PORT`.
    pub fn url_as(&self, user: &str, password: &str) -> String {
        format!("redis://{user}:{password}@{}", self.addr())
    }

    /// Creates (or replaces) the ACL user `user` on this running server,
    /// as [`RedisServerBuilder::acl_user`] describes; lost on a restart.
    /// Panics if the server refuses a rule.
    #[track_caller]
    pub fn set_acl_user(&self, user: &str, password: &str, rules: &[&str]) {
        let password = format!(">{password}");
        let command: Vec<&str> = ["ACL", "SETUSER", user, "reset", "on", &password]
            .into_iter()
            .chain(rules.iter().copied())
            .collect();
        if let Err(err) = self.command(&command) {
            panic!("ACL SETUSER {user} on {}: {err}", self.addr());
        }
    }
}

impl RedisCluster {
    /// Creates (or replaces) the ACL user `user` on every running node,
    /// primaries and replicas (a cluster does not share its ACL between
    /// nodes); see [`RedisServer::set_acl_user`].
    #[track_caller]
    pub fn set_acl_user(&self, user: &str, password: &str, rules: &[&str]) {
        for node in self.primaries().into_iter().chain(self.replicas()) {
            node.set_acl_user(user, password, rules);
        }
    }

    /// [`seed_urls`](Self::seed_urls) logging in as `user` with `password`.
    pub fn seed_urls_as(&self, user: &str, password: &str) -> Vec<String> {
        self.seed_urls()
            .iter()
            .map(|url| url.replacen("redis://", &format!("redis://{user}:{password}@"), 1))
            .collect()
    }
}
