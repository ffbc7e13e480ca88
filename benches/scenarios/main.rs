//! Load generator: quorumlock side by side with rslock and with a hand-written floor, on
//! the same five local redis-server nodes, in the same run. See docs/benchmarks.md.
//!
//! ```text
//! cargo bench --bench scenarios                          # full run (about 4 minutes)
//! QUORUMLOCK_BENCH_SMOKE=1 cargo bench --bench scenarios # every scenario briefly, checked
//! cargo bench --bench scenarios -- --help                # options
//! ```
//!
//! Each scenario runs every contender in turn, in an order that alternates between
//! repetitions (A B C, C B A, A B C, ...), and reports per contender the medians over the
//! repetitions of ops/s, p50, p99 and max, and the ratios quorumlock/rslock as the median of
//! the per-repetition ratios (the two runs of a repetition are back to back).

mod clients;
mod delay;
mod family;
mod load;
mod machine;
mod memory;
mod options;
mod physical;
mod plot;
mod report;
mod results_doc;
mod scaling;
mod scenarios;
mod sharding;
mod stats;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use clients::Contender;
use delay::{DelayProxies, Profile};
use load::run_one;
use machine::Machine;
use options::Options;
use quorumlock_testkit::{Direction, FaultProxy, RedisCluster};
use report::{read_criterion, ProfileRun, Report};
use scenarios::{smoke_checks, Load, Nodes, Results, ADDED_LATENCY, NODES, SCENARIOS, SLOW_NODE};
use stats::{fmt_rate, fmt_us, Outcome};

#[global_allocator]
static ALLOC: memory::Counting = memory::Counting;

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().map(String::as_str) == Some(delay::PROXY_FLAG) {
        return delay::serve(&args[1..]);
    }
    let options = match Options::parse() {
        Ok(options) => options,
        Err(err) => {
            eprintln!("scenarios: {err}");
            return ExitCode::from(2);
        }
    };
    // The results writer's tests, and the document it will rewrite (a smoke run: the
    // repository's), before anything is measured.
    let doc = options
        .docs
        .as_deref()
        .or((options.smoke || options.self_test).then(results_doc::repo_doc));
    if let Err(err) = results_doc::check(doc) {
        eprintln!("FAILED: {err}");
        return ExitCode::FAILURE;
    }
    if options.self_test {
        println!("scenarios: self-test passed");
        return ExitCode::SUCCESS;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime");
    // The latency proxy runs on a runtime of its own, so that forwarding the slow node's
    // traffic does not queue behind (or ahead of) the clients' tasks in one scheduler. It
    // still shares the machine's two cores with everything else, like the nodes do.
    let proxy_runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .thread_name("latency-proxy")
        .enable_all()
        .build()
        .expect("proxy runtime");
    let code = runtime.block_on(run(options, proxy_runtime.handle().clone()));
    // Leftover background tasks (stragglers to a thawed node) must not hold the exit.
    runtime.shutdown_timeout(Duration::from_secs(1));
    proxy_runtime.shutdown_timeout(Duration::from_secs(1));
    code
}

/// Starts the nodes and the latency proxy, runs every scenario chosen, and reports.
async fn run(options: Options, proxy_runtime: tokio::runtime::Handle) -> ExitCode {
    let started = Instant::now();
    let machine = Machine::probe();
    println!(
        "quorumlock scenarios: {}",
        if options.smoke {
            "smoke run"
        } else {
            "full run"
        }
    );
    println!("{}", machine.describe());
    println!(
        "{} repetitions, windows x{}, per-operation timeout {:?}\n",
        options.reps, options.scale, options.op_timeout
    );

    let mut cluster = RedisCluster::start(NODES)
        .await
        .expect("start 5 redis-server nodes");
    let direct = cluster.urls();
    let upstream: SocketAddr = ([127, 0, 0, 1], cluster.node(SLOW_NODE).port()).into();
    let proxy = proxy_runtime
        .spawn(FaultProxy::start(upstream))
        .await
        .expect("proxy start task")
        .expect("start the latency proxy");
    proxy.set_latency(Direction::ToServer, ADDED_LATENCY, Duration::ZERO);
    let mut slow = direct.clone();
    slow[SLOW_NODE] = proxy.url();
    let physical = physical::measure(&direct).await;
    println!("loopback PING p50 per node: {}\n", physical.describe());

    let mut results: Results = BTreeMap::new();
    let mut failures: Vec<String> = Vec::new();
    if options.profiles.contains(&Profile::LOOPBACK) {
        run_scenarios(
            &options,
            &mut cluster,
            &mut results,
            &mut failures,
            |nodes| {
                Some(match nodes {
                    Nodes::All | Nodes::OneFrozen => direct.clone(),
                    Nodes::OneSlow => slow.clone(),
                    Nodes::Single => vec![direct[0].clone()],
                })
            },
        )
        .await;
    }
    let mut profiled = Vec::new();
    for &profile in options.profiles.iter().filter(|p| !p.is_loopback()) {
        let ports: Vec<u16> = (0..NODES).map(|i| cluster.node(i).port()).collect();
        let proxies =
            DelayProxies::spawn(profile.each_way, &ports).expect("start the delay proxies");
        let ping = physical::measure(&proxies.urls).await;
        println!(
            "== profile {}: every node behind a delay line in its own process; PING p50 per node: {}",
            profile.label(),
            ping.describe()
        );
        let mut profile_results: Results = BTreeMap::new();
        run_scenarios(
            &options,
            &mut cluster,
            &mut profile_results,
            &mut failures,
            |nodes| match nodes {
                Nodes::All | Nodes::OneFrozen => Some(proxies.urls.clone()),
                Nodes::Single => Some(vec![proxies.urls[0].clone()]),
                // Its own proxy's 20 ms would sit behind the delay line: not run.
                Nodes::OneSlow => None,
            },
        )
        .await;
        profiled.push(ProfileRun {
            profile,
            results: profile_results,
            ping,
        });
    }
    drop(proxy);
    let (family_tables, family_failures) = family::run(&options, &direct).await;
    failures.extend(family_failures);

    let memory = if options.wants("mem") {
        println!("== memory: {} locks held and auto-extended", options.locks);
        let report = memory::measure(&direct, options.locks, options.memory_ttl).await;
        println!("   {report:?}");
        if report.lost > 0 {
            failures.push(format!(
                "memory: {} locks lost while auto-extended",
                report.lost
            ));
        }
        if report.extensions < report.locks as u64 {
            failures.push(format!(
                "memory: only {} extensions for {} locks",
                report.extensions, report.locks
            ));
        }
        Some(report)
    } else {
        None
    };
    drop(cluster);
    if options.wants("sharding") {
        sharding::run(&options, &mut failures).await;
    }
    if options.wants("acks") {
        sharding::replica_acks(&options, &mut failures).await;
    }

    let scaling = if options.wants("scaling") {
        println!("== scaling: 1 task on 3-9 nodes, 1-256 tasks on 5, 1,000-100,000 locks held");
        let mut nine = RedisCluster::start(scaling::NODE_COUNTS[3])
            .await
            .expect("start 9 redis-server nodes");
        let scaling = scaling::run(&options, &mut nine).await;
        failures.extend(scaling.failures.iter().cloned());
        Some(scaling)
    } else {
        None
    };

    let report = Report {
        options: &options,
        machine: &machine,
        results: &results,
        memory: memory.as_ref(),
        physical: Some(&physical),
        profiles: &profiled,
        micro: options
            .criterion
            .as_deref()
            .map(read_criterion)
            .unwrap_or_default(),
        wall: started.elapsed(),
    };
    let mut tables = report.markdown();
    if let Some(scaling) = &scaling {
        tables.push_str(&scaling.markdown());
    }
    tables.push_str(&family_tables);
    println!("\n{tables}");

    let plots = options.plots.clone().or_else(|| {
        // A smoke run draws its plots too, to prove the plotting works, but not into docs/.
        options
            .smoke
            .then(|| std::env::temp_dir().join("quorumlock-bench-smoke"))
    });
    if let Some(dir) = &plots {
        plot::draw_plots(dir, &results);
        if let Some(scaling) = &scaling {
            scaling.draw(dir);
        }
    }
    if let Some(docs) = &options.docs {
        match results_doc::write(docs, &tables) {
            Ok(()) => println!("results written to {}", docs.display()),
            Err(err) => failures.push(format!("writing {}: {err}", docs.display())),
        }
    }

    let checks = results.len() + usize::from(memory.is_some()) + usize::from(scaling.is_some());
    if failures.is_empty() {
        println!(
            "scenarios: {checks} passed, 0 failed (wall time {:.1} s)",
            started.elapsed().as_secs_f64()
        );
        ExitCode::SUCCESS
    } else {
        for failure in &failures {
            eprintln!("FAILED: {failure}");
        }
        println!(
            "scenarios: {} passed, {} failed",
            checks.saturating_sub(failures.len()),
            failures.len()
        );
        ExitCode::FAILURE
    }
}

/// Runs every scenario chosen whose nodes `urls_for` gives, each repetition's contenders in
/// alternating order, printing each run and keeping it in `results`.
async fn run_scenarios(
    options: &Options,
    cluster: &mut RedisCluster,
    results: &mut Results,
    failures: &mut Vec<String>,
    urls_for: impl Fn(Nodes) -> Option<Vec<String>>,
) {
    for scenario in SCENARIOS.iter().filter(|s| options.wants(s.id)) {
        let Some(urls) = urls_for(scenario.nodes) else {
            continue;
        };
        println!("== {}", scenario.title);
        for rep in 0..options.reps {
            let mut order: Vec<Contender> = scenario
                .contenders
                .iter()
                .copied()
                .filter(|&c| options.runs(c))
                .collect();
            if rep % 2 == 1 {
                order.reverse();
            }
            for contender in order {
                let run = run_one(options, cluster, scenario, contender, &urls, rep).await;
                println!(
                    "   rep {rep} {:<10} {:>10} p50 {:>9} p99 {:>9} max {:>9} cpu/op {:>9}{}{}{}",
                    contender.label(),
                    fmt_rate(Some(run.ops_per_sec())),
                    fmt_us(run.quantile_us(0.5)),
                    fmt_us(run.quantile_us(0.99)),
                    fmt_us(run.max_us()),
                    fmt_us(run.cpu_us_per_op),
                    match run.outcome {
                        Outcome::Completed => String::new(),
                        Outcome::TimedOut(after) => format!("  DID NOT COMPLETE within {after:?}"),
                    },
                    [&run.check, &run.keys_left]
                        .into_iter()
                        .map(|check| match check {
                            Some(Ok(text)) => format!("  [{text}]"),
                            Some(Err(text)) => format!("  [CHECK FAILED: {text}]"),
                            None => String::new(),
                        })
                        .collect::<String>(),
                    match (scenario.load, run.rounds_per_acquire) {
                        (Load::Contended { .. }, rounds) => format!(
                            "  ops per client {}..{}{}",
                            run.per_task.0,
                            run.per_task.1,
                            rounds.map_or(String::new(), |r| format!(
                                ", {r:.2} rounds per acquisition"
                            ))
                        ),
                        _ => String::new(),
                    },
                );
                failures.extend(smoke_checks(scenario, contender, &run));
                results
                    .entry((scenario.id, contender))
                    .or_default()
                    .push(run);
            }
        }
        cluster.flush_all().await.expect("flush the nodes");
    }
}
