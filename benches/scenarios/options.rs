//! The command line: which scenarios and contenders run, how often and how long, and
//! where the plots and the results go.

use std::path::PathBuf;
use std::time::Duration;

use crate::clients::Contender;
use crate::delay::Profile;

/// What this run does, from the command line and `QUORUMLOCK_BENCH_SMOKE`.
#[derive(Debug, Clone)]
pub struct Options {
    pub smoke: bool,
    pub reps: usize,
    /// Multiplies every run's window.
    pub scale: f64,
    pub plots: Option<PathBuf>,
    pub docs: Option<PathBuf>,
    pub criterion: Option<PathBuf>,
    pub only: Option<Vec<String>>,
    /// Run only these contenders (by label), e.g. to profile one of them.
    pub contenders: Option<Vec<String>>,
    pub self_test: bool,
    pub locks: usize,
    pub memory_ttl: Duration,
    pub op_timeout: Duration,
    /// The network profiles the node scenarios run in, in order: loopback as it is, or
    /// every node behind a delay each way.
    pub profiles: Vec<Profile>,
}

impl Options {
    pub fn parse() -> Result<Options, String> {
        let smoke_env =
            std::env::var("QUORUMLOCK_BENCH_SMOKE").is_ok_and(|v| !v.is_empty() && v != "0");
        let mut options = Options {
            smoke: smoke_env,
            reps: 9,
            scale: 1.0,
            plots: None,
            docs: None,
            criterion: None,
            only: None,
            contenders: None,
            self_test: false,
            locks: 10_000,
            memory_ttl: Duration::from_secs(10),
            op_timeout: Duration::from_secs(5),
            profiles: vec![Profile::LOOPBACK],
        };
        let mut reps = None;
        let mut args = std::env::args().skip(1);
        while let Some(arg) = args.next() {
            let mut value = |name: &str| args.next().ok_or(format!("{name} needs a value"));
            match arg.as_str() {
                "--bench" => {} // passed by `cargo bench`
                "--smoke" => options.smoke = true,
                "--reps" => {
                    reps = Some(
                        value("--reps")?
                            .parse()
                            .map_err(|e| format!("--reps: {e}"))?,
                    )
                }
                "--scale" => {
                    options.scale = value("--scale")?
                        .parse()
                        .map_err(|e| format!("--scale: {e}"))?
                }
                "--plots" => options.plots = Some(PathBuf::from(value("--plots")?)),
                "--docs" => options.docs = Some(PathBuf::from(value("--docs")?)),
                "--criterion" => options.criterion = Some(PathBuf::from(value("--criterion")?)),
                "--only" => {
                    options.only = Some(value("--only")?.split(',').map(str::to_owned).collect());
                }
                "--contenders" => {
                    options.contenders = Some(
                        value("--contenders")?
                            .split(',')
                            .map(str::to_owned)
                            .collect(),
                    );
                }
                "--profiles" => {
                    options.profiles = value("--profiles")?
                        .split(',')
                        .map(Profile::parse)
                        .collect::<Result<_, _>>()?;
                }
                "--self-test" => options.self_test = true,
                "--locks" => {
                    options.locks = value("--locks")?
                        .parse()
                        .map_err(|e| format!("--locks: {e}"))?
                }
                "--help" | "-h" => {
                    println!(
                        "options: --smoke | --reps N | --scale X (run windows) | --plots DIR | \
                         --docs FILE (rewrite its results section) | --criterion DIR (add micro results) | \
                         --only s1,s3,mem,sharding,acks | --contenders quorumlock,quorumlock-unfair,rslock,floor,no-lock | --locks N | \
                         --profiles loopback,0.25ms,1ms (the scenarios again with every node, peers' too, behind that delay each way) | \
                         --self-test (check the results writer and docs/benchmarks.md, then exit)"
                    );
                    std::process::exit(0);
                }
                other if other.starts_with("--") => return Err(format!("unknown option {other}")),
                _ => {} // a benchmark-name filter from `cargo bench NAME`: ignored
            }
        }
        if options.smoke {
            options.reps = 1;
            options.scale = options.scale.min(0.02);
            options.locks = options.locks.min(500);
            options.memory_ttl = Duration::from_secs(1);
            options.op_timeout = Duration::from_secs(1);
        }
        if let Some(reps) = reps {
            options.reps = reps;
        }
        if options.reps == 0 {
            return Err("--reps must be at least 1".to_owned());
        }
        Ok(options)
    }

    pub fn wants(&self, id: &str) -> bool {
        self.only
            .as_ref()
            .is_none_or(|only| only.iter().any(|o| o == id))
    }

    pub fn runs(&self, contender: Contender) -> bool {
        self.contenders
            .as_ref()
            .is_none_or(|only| only.iter().any(|c| c == contender.label()))
    }

    pub fn window(&self, full: Duration) -> Duration {
        full.mul_f64(self.scale).max(Duration::from_millis(30))
    }
}
