//! Compile-time checks that the public types and futures can cross threads, as tokio's
//! `fn bounds()` does: a lock shared by the tasks of a multi-threaded runtime, its guards
//! moved between them, its futures spawned. A change that loses `Send` or `Sync` fails the
//! build here, not in a user's `tokio::spawn`.

use std::time::Duration;

use crate::{
    AutoExtend, Election, Leader, Leadership, LockConfig, LockError, LockFactory, LockGuard,
    LockToken, LostSignal, NamedLock, NodeAddress, Nodes, Permit, RedisLock, Redlock, ReplicaAcks,
    RwLock, Semaphore,
};

fn send<T: Send>(_: &T) {}

fn send_sync<T: Send + Sync>() {}

const _: fn() = || {
    send_sync::<Redlock>();
    send_sync::<LockFactory<Redlock>>();
    send_sync::<NamedLock<Redlock>>();
    send_sync::<Nodes>();
    send_sync::<NodeAddress>();
    send_sync::<LockGuard>();
    send_sync::<LostSignal>();
    send_sync::<LockConfig>();
    send_sync::<LockToken>();
    send_sync::<LockError>();
    send_sync::<AutoExtend>();
    send_sync::<ReplicaAcks>();
    send_sync::<Semaphore>();
    send_sync::<Permit>();
    send_sync::<Election>();
    send_sync::<Leadership>();
    send_sync::<Leader>();
    send_sync::<RwLock>();
};

const _: fn(&RwLock) = |rwlock| {
    send(&rwlock.try_read());
    send(&rwlock.read());
    send(&rwlock.read_timeout(Duration::from_secs(1)));
    send(&rwlock.with_read(|_lost| async {}));
    send(&rwlock.try_write());
    send(&rwlock.write());
    send(&rwlock.write_timeout(Duration::from_secs(1)));
    send(&rwlock.with_write(|_lost| async {}));
};

/// The lock family's futures.
const _: fn(&Semaphore, &mut Permit) = |semaphore, permit| {
    send(&semaphore.try_acquire());
    send(&semaphore.acquire());
    send(&semaphore.acquire_timeout(Duration::from_secs(1)));
    send(&semaphore.with(|_lost| async {}));
    send(&permit.refresh());
    send(&permit.is_acquired());
};

const _: fn(&Election, &mut Leadership) = |election, leadership| {
    send(&election.campaign("value"));
    send(&election.campaign_timeout("value", Duration::from_secs(1)));
    send(&election.leader());
    send(&election.observe());
    send(&leadership.proclaim("value"));
    send(&leadership.is_leader());
};

/// The futures of the operations, made (never awaited) from borrowed locks and guards.
const _: fn(&Redlock, &RedisLock, &NamedLock<Redlock>, &mut LockGuard) =
    |redlock, single, named, guard| {
        send(&redlock.try_acquire("r"));
        send(&redlock.acquire("r"));
        send(&redlock.try_acquire_many(&["a", "b"]));
        send(&redlock.acquire_many(&["a", "b"]));
        send(&redlock.acquire_timeout("r", Duration::from_secs(1)));
        send(&redlock.with("r", |_lost| async {}));
        send(&redlock.release_token("r", &LockToken::generate()));
        send(&Redlock::connect(
            ["redis://127.0.0.1"],
            LockConfig::default(),
        ));
        send(&single.try_acquire("r"));
        send(&single.acquire("r"));
        send(&single.acquire_timeout("r", Duration::from_secs(1)));
        send(&single.with("r", |_lost| async {}));
        send(&RedisLock::connect(
            "redis://127.0.0.1",
            LockConfig::default(),
        ));
        send(&named.try_acquire());
        send(&named.acquire());
        send(&named.acquire_timeout(Duration::from_secs(1)));
        send(&named.with(|_lost| async {}));
        send(&guard.refresh());
        send(&guard.is_acquired());
        send(&guard.lost().wait());
        send(&crate::DistributedLock::release(redlock, guard));
        send(&crate::DistributedLock::refresh(single, guard));
    };

/// A guard's release consumes it.
const _: fn(LockGuard) = |guard| send(&guard.release());
