//! What PostgreSQL serves alone: `pgbench -S` on pgbench's own tables in a scratch database,
//! then the lab's hot statement (`lab_db::queries::CANDIDATE_LOOKUP`, verbatim) as a pgbench
//! script against the lab database, its parameters drawn from the seeded entities. pgbench is
//! run as it is (the thin shell); its output is parsed here.

use std::path::Path;
use std::time::Duration;

use anyhow::{bail, Context};
use rand::seq::SliceRandom;
use rand::SeedableRng;
use tokio::process::Command;

use super::cpu::{self, Who};
use super::summary::PgbenchRow;

/// The select-only run's name, and the hot statement's.
pub const SELECT_ONLY: &str = "select-only";
pub const HOT: &str = "hot-candidate-lookup";
/// Entities the hot script draws its parameters from.
const HOT_SAMPLE: usize = 2_000;

/// What pgbench printed that the report needs.
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub tps: f64,
    pub latency_ms: f64,
    /// `-r`: each statement's mean latency (ms) and its text.
    pub statements: Vec<(f64, String)>,
}

/// Parse pgbench's report (`tps = …`, `latency average = … ms`, and with `-r` the statement
/// lines `   0.121   0  SELECT …`: latency, failures, text — pgbench 15's layout).
pub fn parse_output(text: &str) -> anyhow::Result<Output> {
    let value = |prefix: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next()?.parse::<f64>().ok())
    };
    let (Some(tps), Some(latency_ms)) = (value("tps = "), value("latency average = ")) else {
        bail!("pgbench printed no `tps = ` and `latency average = ` lines (did it fail?)");
    };
    let statements = text
        .lines()
        .filter(|l| l.starts_with(char::is_whitespace))
        .filter_map(|l| {
            let mut it = l.split_whitespace();
            let ms = it.next()?.parse::<f64>().ok()?;
            it.next()?.parse::<u64>().ok()?;
            let rest: Vec<&str> = it.collect();
            (!rest.is_empty()).then(|| (ms, rest.join(" ")))
        })
        .collect();
    Ok(Output {
        tps,
        latency_ms,
        statements,
    })
}

/// A run's row: lookups per transaction are the hot statements in the script (1 for `-S`).
pub fn row(script: &str, clients: u32, out: &Output) -> PgbenchRow {
    let hot: Vec<f64> = out
        .statements
        .iter()
        .filter(|(_, s)| s.starts_with("SELECT id, canonical_name"))
        .map(|(ms, _)| *ms)
        .collect();
    let pick = out
        .statements
        .iter()
        .find(|(_, s)| s.starts_with("SELECT a.t["))
        .map(|(ms, _)| *ms);
    let per = hot.len().max(1);
    PgbenchRow {
        script: script.to_string(),
        clients,
        tps: out.tps,
        lookups_per_txn: per,
        lookups_s: out.tps * per as f64,
        latency_ms: out.latency_ms,
        stmt_ms: (!hot.is_empty()).then(|| hot.iter().sum::<f64>() / hot.len() as f64),
        pick_ms: pick,
        cpu: None,
    }
}

/// One sampled entity's parameters: tenant, kind, the tenant's document locale.
pub type Params = (i64, String, Option<String>);

fn sql_literal(s: Option<&str>) -> String {
    s.map_or("NULL".into(), |s| format!("'{}'", s.replace('\'', "''")))
}

/// The hot script: `per` indexes drawn, one row of parameters picked with `\gset` from constant
/// arrays (no table is created; fixed-width arrays make the pick O(1)), then `per` hot lookups.
/// pgbench's `\gset` turns a NULL locale into '' and `locale = '' OR locale IS NULL` selects the
/// rows `locale = NULL OR locale IS NULL` does.
pub fn hot_script(rows: &[Params], per: usize, statement: &str) -> String {
    let mut kinds: Vec<&str> = rows.iter().map(|(_, k, _)| k.as_str()).collect();
    kinds.sort_unstable();
    kinds.dedup();
    let mut locales: Vec<Option<&str>> = rows
        .iter()
        .filter_map(|(_, _, l)| l.as_deref())
        .map(Some)
        .collect();
    locales.sort_unstable();
    locales.dedup();
    locales.push(None);
    let index =
        |v: &[Option<&str>], x: Option<&str>| v.iter().position(|y| *y == x).unwrap_or(0) + 1;
    let join = |it: Vec<String>| it.join(",");
    let ta = join(rows.iter().map(|(t, _, _)| t.to_string()).collect());
    let ka = join(
        rows.iter()
            .map(|(_, k, _)| (kinds.iter().position(|x| x == k).unwrap_or(0) + 1).to_string())
            .collect(),
    );
    let la = join(
        rows.iter()
            .map(|(_, _, l)| index(&locales, l.as_deref()).to_string())
            .collect(),
    );
    let karr = format!(
        "ARRAY[{}]::text[]",
        join(kinds.iter().map(|k| sql_literal(Some(k))).collect())
    );
    let larr = format!(
        "ARRAY[{}]::text[]",
        join(locales.iter().map(|l| sql_literal(*l)).collect())
    );
    let mut s = String::new();
    for j in 1..=per {
        s.push_str(&format!("\\set i{j} random(1, {})\n", rows.len()));
    }
    let cols: Vec<String> = (1..=per)
        .map(|j| {
            format!(
                "a.t[:i{j}] AS t{j}, ({karr})[a.k[:i{j}]] AS k{j}, ({larr})[a.l[:i{j}]] AS l{j}"
            )
        })
        .collect();
    s.push_str(&format!(
        "SELECT {} FROM (SELECT ARRAY[{ta}]::bigint[] AS t, ARRAY[{ka}]::int[] AS k, ARRAY[{la}]::int[] AS l) a \\gset\n",
        cols.join(", ")
    ));
    // One line per statement: pgbench's -r report then names each by its first words.
    let one_line = statement.split_whitespace().collect::<Vec<_>>().join(" ");
    for j in 1..=per {
        let q = one_line
            .replace("$1", &format!(":t{j}"))
            .replace("$2", &format!(":k{j}"))
            .replace("$3", &format!(":l{j}"));
        s.push_str(&format!("{q};\n"));
    }
    s
}

/// A sample of the seeded entities (tenants in proportion to their size, kinds as the
/// catalogue has them), each with its tenant's locale from the corpus.
pub async fn sample_params(database_url: &str, data_dir: &Path) -> anyhow::Result<Vec<Params>> {
    let mut locale = std::collections::HashMap::new();
    for d in lab_seed::read_corpus(data_dir)? {
        locale.entry(d.tenant_id).or_insert(d.locale);
    }
    let client = lab_db::inspect::connect(database_url).await?;
    let sampled = client
        .query(
            "SELECT tenant_id, kind FROM entities TABLESAMPLE BERNOULLI (1) REPEATABLE (17)",
            &[],
        )
        .await
        .context("sampling the seeded entities")?;
    let mut rows: Vec<Params> = sampled
        .iter()
        .filter_map(|r| {
            let t: i64 = r.get(0);
            Some((t, r.get::<_, String>(1), locale.get(&t)?.clone()))
        })
        .collect();
    anyhow::ensure!(
        !rows.is_empty(),
        "no sampled entity belongs to a tenant of the corpus: seed the lab (`labctl seed`)"
    );
    rows.shuffle(&mut rand::rngs::StdRng::seed_from_u64(17));
    rows.truncate(HOT_SAMPLE);
    Ok(rows)
}

/// `postgres://…/retry_storm_lab?x` with another database: `postgres://…/<db>?x`.
pub fn with_database(url: &str, db: &str) -> String {
    let (base, rest) = url.rsplit_once('/').unwrap_or((url, ""));
    let query = rest
        .split_once('?')
        .map(|(_, q)| format!("?{q}"))
        .unwrap_or_default();
    format!("{base}/{db}{query}")
}

/// What the pgbench phase needs.
pub struct Plan<'a> {
    pub database_url: &'a str,
    pub data_dir: &'a Path,
    /// The scratch database `pgbench -i` fills (dropped afterwards).
    pub scratch_db: &'a str,
    pub scale: u32,
    pub seconds: u64,
    pub clients: &'a [u32],
    pub hot_per_txn: usize,
    /// Where the logs and hot.sql go.
    pub dir: &'a Path,
    pub cores: usize,
}

/// pgbench's runs, one per script and client count, each with the machine's CPU split; and how
/// many sampled entities the hot script drew from. The scratch database is dropped on every path.
pub async fn run_all(plan: &Plan<'_>) -> anyhow::Result<(Vec<PgbenchRow>, usize)> {
    let admin = lab_db::inspect::connect(&with_database(plan.database_url, "postgres")).await?;
    let scratch = lab_db::quote_ident(plan.scratch_db);
    admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {scratch}"))
        .await?;
    admin
        .batch_execute(&format!("CREATE DATABASE {scratch}"))
        .await?;
    // Ctrl-C stops pgbench (its child is killed on drop); the scratch database is dropped below.
    let result = super::interruptible(measure(plan)).await;
    let dropped = admin
        .batch_execute(&format!("DROP DATABASE IF EXISTS {scratch}"))
        .await;
    let out = result?;
    dropped.context("dropping pgbench's scratch database")?;
    Ok(out)
}

async fn measure(plan: &Plan<'_>) -> anyhow::Result<(Vec<PgbenchRow>, usize)> {
    std::fs::create_dir_all(plan.dir)?;
    let scratch_url = with_database(plan.database_url, plan.scratch_db);
    let log = plan.dir.join("pgbench-init.log");
    println!(
        "[chain-limit] pgbench: initialising scale {} in {}",
        plan.scale, plan.scratch_db
    );
    let init = pgbench_cmd(&log)?
        .args(["-i", "-q", "-s", &plan.scale.to_string(), &scratch_url])
        .status()
        .await
        .context("running pgbench (postgresql-client)")?;
    anyhow::ensure!(init.success(), "pgbench -i failed: see {}", log.display());
    let params = sample_params(plan.database_url, plan.data_dir).await?;
    let hot = plan.dir.join("hot.sql");
    std::fs::write(
        &hot,
        hot_script(&params, plan.hot_per_txn, lab_db::queries::CANDIDATE_LOOKUP),
    )?;
    let hot_arg = hot.display().to_string();
    let mut rows = Vec::new();
    let runs: [(&str, Vec<&str>, &str); 2] = [
        (SELECT_ONLY, vec!["-S"], &scratch_url),
        (HOT, vec!["-f", &hot_arg], plan.database_url),
    ];
    for (script, extra, url) in &runs {
        for &c in plan.clients {
            println!(
                "[chain-limit] pgbench {script}: {c} clients, {} s",
                plan.seconds
            );
            let (out, cpu) = run_sampled(plan, script, c, extra, url).await?;
            println!(
                "    tps = {:.0}, latency average = {:.3} ms",
                out.tps, out.latency_ms
            );
            let mut r = row(script, c, &out);
            r.cpu = Some(cpu);
            rows.push(r);
        }
    }
    Ok((rows, params.len()))
}

fn pgbench_cmd(log: &Path) -> anyhow::Result<Command> {
    let f = std::fs::File::create(log)?;
    let mut c = Command::new("pgbench");
    c.stdout(f.try_clone()?).stderr(f).kill_on_drop(true);
    Ok(c)
}

/// One pgbench run, the machine's CPU sampled 1 s after it starts and ~2.5 s before it ends.
async fn run_sampled(
    plan: &Plan<'_>,
    script: &str,
    clients: u32,
    extra: &[&str],
    url: &str,
) -> anyhow::Result<(Output, super::cpu::CpuSplit)> {
    let log = plan.dir.join(format!("pgbench-{script}-c{clients}.log"));
    let mut child = pgbench_cmd(&log)?
        .args([
            "-M",
            "prepared",
            "-n",
            "-r",
            "-c",
            &clients.to_string(),
            "-j",
            "2",
        ])
        .args(["-T", &plan.seconds.to_string()])
        .args(extra)
        .arg(url)
        .spawn()
        .context("running pgbench (postgresql-client)")?;
    let who = Who {
        load: child.id().map(|p| (p, cpu::PGBENCH_CLIENT)),
        lab_db: lab_db::database_name(plan.database_url)?,
        pgbench_db: plan.scratch_db.to_string(),
        ..Who::default()
    };
    tokio::time::sleep(Duration::from_secs(1)).await;
    let a = tokio::task::spawn_blocking(|| cpu::snapshot(&[])).await?;
    tokio::time::sleep(Duration::from_secs_f64(
        (plan.seconds as f64 - 3.5).max(0.5),
    ))
    .await;
    let b = tokio::task::spawn_blocking(|| cpu::snapshot(&[])).await?;
    let status = child.wait().await?;
    let text = std::fs::read_to_string(&log)?;
    anyhow::ensure!(
        status.success(),
        "pgbench {script} -c {clients} failed ({status}): see {}",
        log.display()
    );
    let split = cpu::split(&a, &b, &who, cpu::clock_ticks(), plan.cores);
    Ok((parse_output(&text)?, split))
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOT_OUT: &str = "\
pgbench (15.20 (Debian 15.20-0+deb12u1))
transaction type: hot.sql
number of clients: 2
number of transactions actually processed: 28560
number of failed transactions: 0 (0.000%)
latency average = 1.050 ms
initial connection time = 3.112 ms
tps = 1904.123456 (without initial connection time)
statement latencies in milliseconds and failures:
         0.002           0  \\set i1 random(1, 2000)
         0.065           0  SELECT a.t[:i1] AS t1 FROM (SELECT 1) a \\gset
         0.120           0  SELECT id, canonical_name, normalized_name FROM entities;
         0.122           0  SELECT id, canonical_name, normalized_name FROM entities;
";

    #[test]
    fn parse_output_reads_tps_latency_and_the_statements() {
        let o = parse_output(HOT_OUT).unwrap();
        assert!((o.tps - 1904.123456).abs() < 1e-9);
        assert!((o.latency_ms - 1.05).abs() < 1e-9);
        assert_eq!(o.statements.len(), 4);
        let r = row(HOT, 2, &o);
        assert_eq!(r.lookups_per_txn, 2);
        assert!((r.lookups_s - 2.0 * 1904.123456).abs() < 1e-6);
        assert!((r.stmt_ms.unwrap() - 0.121).abs() < 1e-9);
        assert_eq!(r.pick_ms, Some(0.065));
    }

    #[test]
    fn parse_output_of_select_only_is_one_lookup_per_transaction() {
        let text = "latency average = 0.032 ms\ntps = 63170.5 (without initial connection time)\n\
            statement latencies in milliseconds and failures:\n         0.001  0  \\set aid random(1, 100000 * :scale)\n\
                     0.030  0  SELECT abalance FROM pgbench_accounts WHERE aid = :aid;\n";
        let r = row(SELECT_ONLY, 8, &parse_output(text).unwrap());
        assert_eq!(r.lookups_per_txn, 1);
        assert_eq!(r.stmt_ms, None);
        assert_eq!(r.pick_ms, None);
    }

    #[test]
    fn parse_output_of_a_failed_run_is_an_error() {
        let err = parse_output("pgbench: error: connection to server failed").unwrap_err();
        assert!(err.to_string().contains("tps"), "{err}");
    }

    #[test]
    fn hot_script_substitutes_every_parameter_and_indexes_from_one() {
        let rows = vec![
            (7, "person".to_string(), Some("de-DE".to_string())),
            (9, "org".to_string(), None),
        ];
        let s = hot_script(&rows, 2, "SELECT id, canonical_name\nFROM entities\nWHERE tenant_id = $1 AND kind = $2 AND locale = $3");
        assert!(s.contains("\\set i2 random(1, 2)"), "{s}");
        assert!(s.contains("ARRAY[7,9]::bigint[]"), "{s}");
        // kinds sorted: org=1, person=2; locales: de-DE=1, NULL=2.
        assert!(s.contains("ARRAY[2,1]::int[] AS k"), "{s}");
        assert!(s.contains("ARRAY[1,2]::int[] AS l"), "{s}");
        assert!(s.contains("ARRAY['de-DE',NULL]::text[]"), "{s}");
        assert!(
            s.contains("WHERE tenant_id = :t2 AND kind = :k2 AND locale = :l2;"),
            "{s}"
        );
        assert!(!s.contains('$'), "{s}");
    }

    #[test]
    fn with_database_keeps_the_query() {
        assert_eq!(
            with_database("postgres://u@h:5432/lab?sslmode=disable", "bench"),
            "postgres://u@h:5432/bench?sslmode=disable"
        );
        assert_eq!(
            with_database("postgres://u@h/lab", "postgres"),
            "postgres://u@h/postgres"
        );
    }
}
