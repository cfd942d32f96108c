//! The lab's Redis ACL users against the real Redis (issue 28): each role can do its work and is
//! refused the rest. A gateway taken over cannot write a flag, publish a change, flush or
//! reconfigure the store; a service cannot touch the rate limiter's keys.

use lab_flags::acl::{self, Role, User};
use lab_flags::Store;

fn namespace() -> String {
    format!("acl-test-{:016x}", rand::random::<u64>())
}

/// `Ok(())` or the error code Redis answered with (`NOPERM` for an ACL refusal).
async fn run<S: AsRef<str>>(url: &str, args: &[S]) -> Result<(), String> {
    let client = redis::Client::open(url).unwrap();
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let mut cmd = redis::cmd(args[0].as_ref());
    for a in &args[1..] {
        cmd.arg(a.as_ref());
    }
    cmd.query_async::<redis::Value>(&mut c)
        .await
        .map(drop)
        .map_err(|e| e.code().unwrap_or("no code").to_string())
}

/// Any script at all: the gateway may run none of its own.
const SCRIPT: &str = "return redis.call('TIME')";

#[tokio::test]
async fn each_role_does_its_work_and_is_refused_the_rest() {
    let admin = testkit::redis_url().await;
    let ns = namespace();
    let users = acl::new_users(&ns);
    acl::apply(&admin, &ns, &users).await.unwrap();
    let url = |role| {
        let u: &User = users.iter().find(|u| u.role == role).unwrap();
        acl::url_as(&admin, u).unwrap()
    };
    let (gateway, service) = (url(Role::Gateway), url(Role::Service));
    let flags = format!("{ns}:flags");
    let changed = format!("{ns}:flags:changed");
    let rl = format!("{ns}:rl:7");
    // The operator (labctl: the default user natively) writes a flag.
    let operator = Store::with_namespace(&admin, &ns).unwrap();
    operator.set("client.mode", "legacy").await.unwrap();

    for (who, url) in [("gateway", &gateway), ("service", &service)] {
        // Its work: read the flags (the store's own read), hear of changes.
        let store = Store::with_namespace(url, &ns).unwrap();
        let read = store.read_all().await.unwrap();
        assert_eq!(
            read.get("client.mode").map(String::as_str),
            Some("legacy"),
            "{who}"
        );
        let _changes = store
            .subscribe()
            .await
            .unwrap_or_else(|e| panic!("{who}: {e:#}"));
        run(url, &["PING"]).await.unwrap();
        // Refused: writing a flag, telling others it changed, anything of the store's own.
        let refused: &[&[&str]] = &[
            &["HSET", &flags, "fault.entity.black_hole", "on"],
            &["DEL", &flags],
            &["PUBLISH", &changed, "*"],
            &["FLUSHALL"],
            &["CONFIG", "SET", "save", ""],
            &["SHUTDOWN", "NOSAVE"],
            &["ACL", "SETUSER", who, "on", "+@all", "~*"],
            &["CLIENT", "KILL", "TYPE", "normal"],
            &["KEYS", "*"],
            &["SET", "elsewhere", "1"],
        ];
        for args in refused {
            assert_eq!(
                run(url, args).await,
                Err("NOPERM".to_string()),
                "{who} must be refused {args:?}"
            );
        }
        assert!(
            store.set("fault.entity.black_hole", "on").await.is_err(),
            "{who} wrote a flag through the store"
        );
    }
    // The gateway's limiter is the operator's function (loaded by acl::apply), called on the
    // gateway's own keys, not on the flags; no code of the gateway's own: no script loaded, run by
    // hash or sent whole, no function loaded, replaced or deleted.
    let fcall =
        |key: &str| ["FCALL", acl::RATELIMIT_FUNCTION, "1", key, "100000", "5"].map(String::from);
    assert_eq!(
        run(&gateway, &fcall(&rl)).await,
        Ok(()),
        "the gateway's rate-limit function"
    );
    assert_eq!(
        run(&gateway, &fcall(&flags)).await,
        Err("NOPERM".to_string())
    );
    let sha = redis::Script::new(SCRIPT).get_hash().to_string();
    let own_code: &[&[&str]] = &[
        &["SCRIPT", "LOAD", SCRIPT],
        &["EVALSHA", &sha, "1", &rl],
        &["EVAL", SCRIPT, "1", &rl],
        &["FUNCTION", "LOAD", "REPLACE", acl::RATELIMIT_LIBRARY],
        &["FUNCTION", "DELETE", "retry_storm_lab"],
        &["FUNCTION", "FLUSH"],
    ];
    for args in own_code {
        assert_eq!(
            run(&gateway, args).await,
            Err("NOPERM".to_string()),
            "the gateway must be refused {:?}",
            &args[..2]
        );
    }
    // A service has no business with the rate limiter.
    assert_eq!(run(&service, &fcall(&rl)).await, Err("NOPERM".to_string()));
    assert_eq!(
        operator
            .read_all()
            .await
            .unwrap()
            .get("fault.entity.black_hole"),
        None,
        "no refused write landed"
    );

    let names: Vec<String> = users.iter().map(|u| u.name.clone()).collect();
    acl::delete(&admin, &names).await.unwrap();
    operator.forget().await.unwrap();
    assert!(
        run(&gateway, &["PING"]).await.is_err(),
        "deleted users are gone"
    );
}
