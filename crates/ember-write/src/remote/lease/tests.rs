//! The lease against object_store's in-memory and local-file stores, and a leased mirror.

use std::sync::Arc;
use std::time::Duration;

use object_store::local::LocalFileSystem;
use object_store::memory::InMemory;

use super::super::holder::process_state;
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
        run: None,
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
        lease.renew(store.as_ref()).await;
        let lost = lease.claim.check();
        assert!(
            matches!(&lost, Err(RemoteError::LeaseLost { holder: Some(h), .. }) if h.pid == 4242),
            "{lost:?}"
        );
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
        let mut holder = LeaseHolder::this_process(None);
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
/// lease refuses it, naming the first and its run, until the first closes.
#[test]
fn a_leased_mirror_refuses_a_second_writer_of_its_url_until_it_closes() {
    let bucket = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let run = "0123456789abcdef0123456789abcdef";
    let lease = (0, LeaseTiming::default(), None);
    let interval = Duration::from_secs(3600);
    let named = (0, LeaseTiming::default(), Some(run));
    let mirror =
        super::super::RemoteMirror::start_leased(&url, first.path(), interval, named).unwrap();
    let text = std::fs::read_to_string(bucket.path().join("run/.ember-lease")).unwrap();
    assert!(text.contains(&format!("run={run}")), "{text}");
    let refused = super::super::RemoteMirror::start_leased(&url, second.path(), interval, lease);
    let Err(RemoteError::Leased { pid, .. }) = &refused else {
        panic!("a second writer of a leased run: {refused:?}");
    };
    assert_eq!(*pid, std::process::id());
    let message = refused.unwrap_err().to_string();
    assert!(message.contains(&format!(", run {run} (")), "{message}");
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
    while process_state(child.id()) != Some('Z') {
        assert!(
            std::time::Instant::now() < deadline,
            "the child never ended"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let holder = LeaseHolder {
        pid: child.id(),
        ..LeaseHolder::this_process(None)
    };
    assert_eq!(holder.alive_here(), Some(false));
    child.wait().unwrap();
    assert!(!matches!(
        process_state(std::process::id()),
        Some('Z' | 'X')
    ));
    assert_eq!(LeaseHolder::this_process(None).alive_here(), Some(true));
}

/// Before: a stopped holder of this host (`SIGSTOP`, `scontrol suspend`) was taken for a live
/// one, and a resume beside it was refused for as long as it stayed stopped; it renews
/// nothing, so its renewals alone tell, as a remote holder's do.
#[cfg(target_os = "linux")]
#[test]
fn a_stopped_holder_of_this_host_is_told_by_its_renewals() {
    use rustix::process::{Pid, Signal, kill_process};
    let mut child = std::process::Command::new("sleep")
        .arg("30")
        .spawn()
        .unwrap();
    let pid = Pid::from_raw(child.id() as i32).unwrap();
    kill_process(pid, Signal::STOP).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while process_state(child.id()) != Some('T') {
        assert!(std::time::Instant::now() < deadline, "never stopped");
        std::thread::sleep(Duration::from_millis(10));
    }
    let holder = LeaseHolder {
        pid: child.id(),
        ..LeaseHolder::this_process(None)
    };
    let told = holder.alive_here();
    kill_process(pid, Signal::KILL).unwrap();
    child.wait().unwrap();
    assert_eq!(told, None);
}

/// Appends records naming `steps` (`step 7`) to the staged event file `file`.
fn append_steps(file: &std::path::Path, steps: std::ops::RangeInclusive<u32>) {
    let mut bytes = Vec::new();
    for step in steps {
        crate::framing::frame_into(&mut bytes, format!("step {step}").as_bytes());
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(file)
        .unwrap();
    std::io::Write::write_all(&mut file, &bytes).unwrap();
}

/// The steps the event files of the log at `url` hold, downloaded and read by ember-write's
/// reader, in the order TensorBoard reads them (files by name).
fn steps_read_back(url: &str) -> Vec<u32> {
    let local = super::super::download_private(url).unwrap();
    let mut files: Vec<_> = std::fs::read_dir(local.path())
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| path.to_string_lossy().contains("tfevents"))
        .collect();
    files.sort();
    let mut steps = Vec::new();
    for file in files {
        let scan = crate::Scan::file(&file).unwrap();
        assert!(scan.problems.is_empty(), "{file:?}: {:?}", scan.problems);
        for record in scan.records {
            let text = String::from_utf8(record.data).unwrap();
            steps.push(text.strip_prefix("step ").unwrap().parse().unwrap());
        }
    }
    steps
}

/// A writer of another host (staging `first`) ships steps 1 to 3 and its checkpoint 1, then
/// stops (it renews nothing; its pool's steps 4 and 5 wait in its staging); a writer of this
/// host (staging `second`) waits the lease out and goes on from step 3, as a resume from a
/// checkpoint there does, with steps 4 to 6 and its checkpoint 2. The stopped mirror, its
/// checkpoints (fenced by its claim), and the taker.
fn stopped_and_taken_over(
    url: &str,
    first: &std::path::Path,
    second: &std::path::Path,
) -> (
    super::super::RemoteMirror,
    super::super::Bucket,
    super::super::RemoteMirror,
) {
    use super::super::{Bucket, RemoteMirror};
    let timing = LeaseTiming {
        renew_every: Duration::from_millis(50),
        stale_after: Duration::from_millis(400),
    };
    let interval = Duration::from_secs(3600);
    let elsewhere = LeaseHolder {
        host: "elsewhere".into(),
        ..LeaseHolder::this_process(None)
    };
    let stopped =
        RemoteMirror::start_leased_as(url, first, interval, (0, timing, elsewhere)).unwrap();
    let claim = stopped.claim().unwrap().clone();
    let its_file = first.join("events.out.tfevents.0000000001.elsewhere.1.0");
    append_steps(&its_file, 1..=3);
    stopped.ship().unwrap();
    let checkpoints = |claim: &Claim| {
        let bucket = Bucket::open(&format!("{url}/checkpoints")).unwrap();
        bucket.fenced_by(claim.clone())
    };
    let its_checkpoints = checkpoints(&claim);
    its_checkpoints
        .put("ckpt-000000000001.ember", b"1".to_vec())
        .unwrap();
    claim.pause(true);
    append_steps(&its_file, 4..=5);
    let taker = RemoteMirror::start_leased(url, second, interval, (0, timing, None)).unwrap();
    checkpoints(taker.claim().unwrap())
        .put("ckpt-000000000002.ember", b"taker's".to_vec())
        .unwrap();
    append_steps(
        &second.join("events.out.tfevents.0000000002.here.2.0"),
        4..=6,
    );
    taker.ship().unwrap();
    (stopped, its_checkpoints, taker)
}

/// Before: a writer whose lease another writer took over (stopped past `stale_after`:
/// `SIGSTOP`, a suspended job, a partition) logged "two writers may now write the run" and
/// went on shipping: the log held the steps both wrote twice. Now, continued, it refuses every
/// upload (its window has passed) until its next renewal finds the lease lost; from then on
/// every request answers `LeaseLost`, naming the new holder, nothing more of it reaches the
/// store, and its staging keeps no state for `ember push` to ship.
#[test]
fn a_writer_stopped_past_its_lease_is_stopped_and_ships_nothing_more() {
    let bucket = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(bucket.path().join("run")).unwrap();
    let url = format!("file://{}/run", bucket.path().display());
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (stopped, checkpoints, taker) = stopped_and_taken_over(&url, first.path(), second.path());
    let claim = stopped.claim().unwrap().clone();

    // Continued: past its window, it refuses to write until a renewal tells.
    assert!(matches!(
        claim.check(),
        Err(RemoteError::Unreachable { .. })
    ));
    let refused = stopped.ship().unwrap_err();
    assert!(refused.contains("its lease was last renewed"), "{refused}");
    claim.pause(false);
    let deadline = Instant::now() + Duration::from_secs(5);
    while !claim.is_lost() {
        assert!(Instant::now() < deadline, "the lease was never found lost");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Typed, naming the taker (this process, of this host), in its message too.
    let lost = claim.check().unwrap_err();
    assert!(
        matches!(&lost, RemoteError::LeaseLost { holder: Some(h), .. } if h.pid == std::process::id()),
        "{lost:?}"
    );
    let said = lost.to_string();
    let expected = format!(
        "{url} is no longer this writer's: process {} on host {} took its lease over",
        std::process::id(),
        crate::naming::host_name()
    );
    assert!(said.starts_with(&expected), "{said}");
    assert_eq!(stopped.ship().unwrap_err(), said);
    for written in [
        checkpoints.put("ckpt-000000000002.ember", b"stopped's".to_vec()),
        checkpoints.put("ckpt-000000000003.ember", b"stopped's".to_vec()),
        checkpoints.delete("ckpt-000000000002.ember"),
    ] {
        assert!(
            matches!(written, Err(RemoteError::LeaseLost { .. })),
            "{written:?}"
        );
    }
    assert_eq!(stopped.close().unwrap_err(), said);
    assert!(
        !first
            .path()
            .join(crate::remote::staging::STATE_FILE)
            .exists(),
        "a lost writer's staging keeps its state: `ember push` would ship steps 4 and 5"
    );
    let pushed = crate::orphans::ship_orphans(&[first.path().to_path_buf()]).unwrap();
    assert!(pushed[0].outcome.is_err(), "{pushed:?}");

    // The taker's lease is in place until it closes: the first did not release it.
    let held = std::fs::read(bucket.path().join("run/.ember-lease")).unwrap();
    assert_eq!(
        LeaseHolder::decode(&held).unwrap().host,
        crate::naming::host_name()
    );
    taker.close().unwrap();
    assert_eq!(steps_read_back(&url), (1..=6).collect::<Vec<_>>());
    let names: Vec<String> = checkpoints
        .list()
        .unwrap()
        .into_iter()
        .map(|l| l.name)
        .collect();
    assert_eq!(
        names,
        ["ckpt-000000000001.ember", "ckpt-000000000002.ember"]
    );
    assert_eq!(
        checkpoints.get("ckpt-000000000002.ember").unwrap().unwrap(),
        b"taker's"
    );
}

/// A write racing a takeover never replaces what the new holder wrote there. Stopped right
/// after the check that let it write (the window its claim leaves cannot hold a takeover, a
/// stop can), the old holder goes on to find the object created meanwhile, where it was new
/// (its window has passed when it looks again: refused), or replaced meanwhile, where it was
/// there (its conditional update fails).
#[test]
fn a_write_racing_a_takeover_never_replaces_the_new_holder_s_object() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::super::claim::{Unfenced, put_fenced};
    for (stopped_after_check, there_before) in [(1, false), (2, true)] {
        let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
        let object = ObjectPath::from("run/checkpoints/ckpt-000000000005.ember");
        let past = Instant::now().checked_sub(quick().valid_for()).unwrap();
        let claim = super::Claim::new("memory:///run", quick(), past);
        let checks = AtomicUsize::new(0);
        let check = || {
            let check = checks.fetch_add(1, Ordering::SeqCst) + 1;
            if check == stopped_after_check {
                // Meanwhile, the new holder writes the object: on a thread of its own, as
                // the new holder is another process.
                std::thread::scope(|scope| {
                    scope.spawn(|| {
                        runtime()
                            .block_on(store.put(&object, b"the new holder's".to_vec().into()))
                            .unwrap();
                    });
                });
                return Ok(());
            }
            match check {
                1 => Ok(()),
                _ => claim.check(),
            }
        };
        let written = runtime().block_on(async {
            if there_before {
                store.put(&object, b"older".to_vec().into()).await.unwrap();
            }
            put_fenced(store.as_ref(), &object, b"stale".to_vec().into(), &check).await
        });
        let expected_refusal = match written {
            Err(Unfenced::Refused(RemoteError::Unreachable { .. })) => !there_before,
            Err(Unfenced::Changed) => there_before,
            _ => false,
        };
        assert!(
            expected_refusal,
            "stopped after check {stopped_after_check}: {written:?}"
        );
        let kept =
            runtime().block_on(async { store.get(&object).await.unwrap().bytes().await.unwrap() });
        assert_eq!(&kept[..], b"the new holder's");
    }
}

/// A store that lost this holder's last renewal (restored from before it) holds an earlier
/// version of its lease: a refused renewal then finds its own lease, not another writer's,
/// and the next renewal goes through.
#[test]
fn a_renewal_refused_over_an_earlier_version_of_its_own_lease_goes_on() {
    let store: Arc<dyn ObjectStore> = Arc::new(InMemory::new());
    runtime().block_on(async {
        let prefix = ObjectPath::from("run");
        let mut lease = Lease::take(store.as_ref(), &prefix, 0, "memory:///run", quick())
            .await
            .unwrap();
        let (earlier, _) = read(store.as_ref(), &lease_object(&prefix, 0))
            .await
            .unwrap()
            .unwrap();
        // A renewal stamped a later millisecond than the take.
        tokio::time::sleep(Duration::from_millis(5)).await;
        lease.renew(store.as_ref()).await;
        // Restored from before that renewal: the e-tag this holder wrote last is gone.
        put(
            store.as_ref(),
            &lease_object(&prefix, 0),
            &earlier,
            PutMode::Overwrite,
        )
        .await
        .unwrap();
        lease.renew(store.as_ref()).await;
        assert!(!lease.claim.is_lost());
        lease.renew(store.as_ref()).await;
        lease.claim.check().unwrap();
        let (now, _) = read(store.as_ref(), &lease_object(&prefix, 0))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(now, lease.holder);
    });
}
