//! The CLI as an ACL user: a user granted exactly the commands, keys and channels that
//! docs/operations.md ("ACL users") lists runs `run` (with and without fencing), `status`
//! and `release`, and the servers log no denial at all (`ACL LOG`). tests/acl.rs at the
//! repository root does the same for the library's operations.

// The user and its grant are the library test's own, so the two cannot drift apart.
#[path = "../../../tests/servers/acl_user.rs"]
mod acl_user;

use std::process::{Output, Stdio};
use std::time::Duration;

use self::acl_user::{acl_cluster, denials, user_urls, PREFIX};
use crate::support::{bare, output};

#[tokio::test]
async fn a_user_with_exactly_the_listed_grants_runs_every_cli_command() {
    let cluster = acl_cluster().await;
    let nodes = user_urls(&cluster).join(",");
    let cli = |args: &[&str]| {
        let mut command = bare();
        command
            .env("QUORUMLOCK_NODES", &nodes)
            .env("QUORUMLOCK_KEY_PREFIX", PREFIX)
            .args(["--node-timeout", "250ms"])
            // The listed grants leave CONFIG out, so the fresh servers cannot say they
            // fsync every write and would abstain for a lease (docs/operations.md, "ACL
            // users"): the test started them just now.
            .arg("--no-restart-abstention")
            .args(args);
        command
    };
    let check = |output: &Output, code: i32| {
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(code), "{stderr}");
        assert!(!stderr.contains("secret"), "{stderr}");
    };
    let run = output(&mut cli(&["run", "-r", "cli", "--", "true"])).await;
    check(&run, 0);
    let fenced = output(&mut cli(&["run", "--fencing", "-r", "cli", "--", "true"])).await;
    check(&fenced, 0);

    // status and release while a holder runs.
    let mut holder = cli(&["run", "--json", "-r", "held", "--", "sleep", "30"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = holder.stderr.take().unwrap();
    let mut lines = tokio::io::AsyncBufReadExt::lines(tokio::io::BufReader::new(stderr));
    let token = loop {
        let line = tokio::time::timeout(Duration::from_secs(20), lines.next_line())
            .await
            .expect("the holder reports its token")
            .unwrap()
            .expect("a line from the holder");
        let event: serde_json::Value = serde_json::from_str(&line).unwrap_or_default();
        if let Some(token) = event["token"].as_str() {
            break token.to_owned();
        }
    };
    let status = output(&mut cli(&["status", "held"])).await;
    check(&status, 0);
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        text.contains(&format!("held by {token} on 3/3 nodes")),
        "{text}"
    );
    let release = output(&mut cli(&["release", "held", "--token", &token])).await;
    check(&release, 0);
    holder.kill().await.unwrap();

    let denied = denials(&cluster).await;
    assert!(denied.is_empty(), "denied: {denied:#?}");
}
