//! The lease against object_store's in-memory and local-file stores, and a leased mirror.

use std::sync::Arc;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

use super::*;

fn quick() -> LeaseTiming {
    LeaseTiming {
        renew_every: Duration::from_millis(100),
        stale_after: Duration::from_millis(400),
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

/// A lease of a process on another host, renewed `ago` before now.
async fn plant(store: &dyn ObjectStore, prefix: &ObjectPath, ago: Duration) {
    let renewed = now_ms() - u64::try_from(ago.as_millis()).unwrap();
    let elsewhere = LeaseHolder {
        host: "elsewhere".into(),
        pid: 4242,
        taken_ms: renewed,
        renewed_ms: renewed,
    };
    put(
        store,
        &lease_object(prefix, 0),
        &elsewhere,
        PutMode::Overwrite,
    )
    .await
    .unwrap();
}

async fn holder_of(store: &dyn ObjectStore, prefix: &ObjectPath) -> Option<LeaseHolder> {
    read(store, &lease_object(prefix, 0))
        .await
        .unwrap()
        .map(|(holder, _)| holder)
}

fn stores() -> Vec<(Arc<dyn ObjectStore>, tempfile::TempDir)> {
    let dir = tempfile::tempdir().unwrap();
    let local = LocalFileSystem::new_with_prefix(dir.path()).unwrap();
    vec![
        (Arc::new(InMemory::new()), tempfile::tempdir().unwrap()),
        (Arc::new(local), dir),
    ]
}

#[test]
fn a_fresh_lease_is_refused_naming_its_holder_and_released_at_close() {
    for (store, _dir) in stores() {
        runtime().block_on(async {
            let prefix = ObjectPath::from("runs/three");
            let url = "s3://runs/three";
            let lease = Lease::take(store.as_ref(), &prefix, 0, url, quick())
                .await
                .unwrap();
            let refused = Lease::take(store.as_ref(), &prefix, 0, url, quick()).await;
            let Err(RemoteError::Leased { pid, host, .. }) = &refused else {
                panic!("a second taker of a live lease: {refused:?}");
            };
            assert_eq!(
                (*pid, host.as_str()),
                (std::process::id(), &*crate::naming::host_name())
            );
            let message = refused.unwrap_err().to_string();
            assert!(
                message.starts_with("s3://runs/three is in use by process"),
                "{message}"
            );
            // Another rank's lease is its own.
            let other = Lease::take(store.as_ref(), &prefix, 1, url, quick()).await;
            other.unwrap().release(store.as_ref()).await;
            lease.release(store.as_ref()).await;
            assert_eq!(holder_of(store.as_ref(), &prefix).await, None);
            Lease::take(store.as_ref(), &prefix, 0, url, quick())
                .await
                .unwrap();
        });
    }
}

#[test]
fn a_stale_lease_is_taken_over_and_a_renewed_one_refused() {
    for (store, _dir) in stores() {
        runtime().block_on(async {
            let prefix = ObjectPath::from("run");
            // Not renewed for longer than `stale_after` by its own clock: taken at once.
            plant(store.as_ref(), &prefix, Duration::from_secs(60)).await;
            let started = Instant::now();
            let lease = Lease::take(store.as_ref(), &prefix, 0, "file:///run", quick())
                .await
                .unwrap();
            assert!(started.elapsed() < quick().stale_after);
            let holder = holder_of(store.as_ref(), &prefix).await.unwrap();
            assert_eq!(holder.pid, std::process::id());
            lease.release(store.as_ref()).await;
            // Fresh by its clock and never renewed: taken once watched for `stale_after`.
            plant(store.as_ref(), &prefix, Duration::ZERO).await;
            let started = Instant::now();
            Lease::take(store.as_ref(), &prefix, 0, "file:///run", quick())
                .await
                .unwrap();
            // Less a millisecond: the lease's times are whole milliseconds.
            let waited = started.elapsed() + Duration::from_millis(1);
            assert!(waited >= quick().stale_after, "{waited:?} on {store}");
            // Renewed while watched: its holder lives, and is named.
            plant(store.as_ref(), &prefix, Duration::ZERO).await;
            let renewing = async {
                tokio::time::sleep(Duration::from_millis(150)).await;
                plant(store.as_ref(), &prefix, Duration::ZERO).await;
            };
            let taking = Lease::take(store.as_ref(), &prefix, 0, "file:///run", quick());
            let ((), refused) = futures_util::future::join(renewing, taking).await;
            assert!(
                matches!(&refused, Err(RemoteError::Leased { pid: 4242, host, .. }) if host == "elsewhere"),
                "{refused:?}"
            );
        });
    }
}

#[test]
fn of_two_takers_of_a_stale_lease_one_wins() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    for _ in 0..20 {
        let prefix = ObjectPath::from("run");
        runtime().block_on(plant(store.as_ref(), &prefix, Duration::from_secs(60)));
        let barrier = Arc::new(std::sync::Barrier::new(4));
        let takers: Vec<_> = (0..4)
            .map(|_| {
                let (store, prefix) = (Arc::clone(&store), prefix.clone());
                let barrier = Arc::clone(&barrier);
                std::thread::spawn(move || {
                    barrier.wait();
                    runtime().block_on(Lease::take(
                        store.as_ref(),
                        &prefix,
                        0,
                        "memory:///run",
                        quick(),
                    ))
                })
            })
            .collect();
        let results: Vec<_> = takers.into_iter().map(|t| t.join().unwrap()).collect();
        let won = results.iter().filter(|r| r.is_ok()).count();
        assert_eq!(won, 1, "{results:?}");
        for result in &results {
            assert!(result.is_ok() || matches!(result, Err(RemoteError::Leased { .. })));
        }
    }
}

#[test]
fn a_holder_whose_lease_was_taken_over_stops_renewing_and_keeps_the_winner_s() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    runtime().block_on(async {
        let prefix = ObjectPath::from("run");
        let mut lease = Lease::take(store.as_ref(), &prefix, 0, "memory:///run", quick())
            .await
            .unwrap();
        // Another writer took it over while this one stalled.
        plant(store.as_ref(), &prefix, Duration::ZERO).await;
        tokio::time::sleep(quick().renew_every).await;
        lease.renew_if_due(store.as_ref()).await;
        assert!(lease.lost);
        lease.release(store.as_ref()).await;
        assert_eq!(holder_of(store.as_ref(), &prefix).await.unwrap().pid, 4242);
    });
}

#[test]
fn a_dead_process_of_this_host_holds_nothing() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    // No process has an id past the kernel's largest (spawning one to wait for would fork
    // this test process, whose children hold other tests' locks for a moment).
    let dead = i32::MAX as u32;
    runtime().block_on(async {
        let prefix = ObjectPath::from("run");
        let mut holder = LeaseHolder::this_process();
        holder.pid = dead;
        put(
            store.as_ref(),
            &lease_object(&prefix, 0),
            &holder,
            PutMode::Create,
        )
        .await
        .unwrap();
        let started = Instant::now();
        let slow = LeaseTiming {
            stale_after: Duration::from_secs(3600),
            ..quick()
        };
        Lease::take(store.as_ref(), &prefix, 0, "memory:///run", slow)
            .await
            .unwrap();
        assert!(started.elapsed() < Duration::from_secs(5));
    });
}

/// Before: a second writer of a bucket run was let in beside the first; now the first's
/// lease refuses it, naming the first, until the first closes.
#[test]
fn a_leased_mirror_refuses_a_second_writer_of_its_url_until_it_closes() {
    let bucket = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let lease = (0, LeaseTiming::default());
    let interval = Duration::from_secs(3600);
    let mirror =
        super::super::RemoteMirror::start_leased(&url, first.path(), interval, lease).unwrap();
    let refused = super::super::RemoteMirror::start_leased(&url, second.path(), interval, lease);
    let Err(RemoteError::Leased { pid, .. }) = &refused else {
        panic!("a second writer of a leased run: {refused:?}");
    };
    assert_eq!(*pid, std::process::id());
    assert!(matches!(
        super::check_lease(&url, 0, LeaseTiming::default()),
        Err(RemoteError::Leased { .. })
    ));
    assert!(bucket.path().join("run/.ember-lease").is_file());
    mirror.close().unwrap();
    assert!(
        !bucket.path().join("run/.ember-lease").exists(),
        "released at the close"
    );
    super::check_lease(&url, 0, LeaseTiming::default()).unwrap();
    let again =
        super::super::RemoteMirror::start_leased(&url, second.path(), interval, lease).unwrap();
    again.close().unwrap();
}

#[cfg(target_os = "linux")]
#[test]
fn a_zombie_holder_holds_nothing() {
    // A child that has exited and is not yet waited for is a zombie: it still answers a
    // signal test, as a job's rank killed while its parent died does until it is reaped.
    let mut child = std::process::Command::new("true").spawn().unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !is_zombie(child.id()) {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let holder = LeaseHolder {
        pid: child.id(),
        ..LeaseHolder::this_process()
    };
    assert_eq!(holder.alive_here(), Some(false));
    child.wait().unwrap();
    assert!(!is_zombie(std::process::id()));
    assert_eq!(LeaseHolder::this_process().alive_here(), Some(true));
}
