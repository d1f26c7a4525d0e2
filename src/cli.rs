//! The `quiver` command line: parsing, and the commands over a step registry.

use std::path::PathBuf;
use std::process::ExitCode;

use crate::default_plan;
use clap::{Args, Parser, Subcommand};
use quiver_columnar::{executor, plan, JobContext, PlanSpec, Registry, RunOptions};

/// Quiver: Arrow-native columnar event reconstruction.
///
/// Every product is an Arrow table; every reconstruction step is a columnar operator; a
/// plan (TOML) composes steps. Start with `quiver run` (the default plan on the default
/// dataset), `quiver steps` (the catalogue) and `quiver plan check PLAN`.
#[derive(Parser)]
#[command(name = "quiver", version, about, long_about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a plan over events and print a summary (time per step, bytes per product, pool)
    Run(RunArgs),
    /// List every step type with its inputs, outputs, parameters, defaults and backends
    Steps,
    /// Work with plans
    Plan {
        #[command(subcommand)]
        command: PlanCommand,
    },
    /// Measure throughput: run a plan at several thread counts on the same events, side by side
    Bench(BenchArgs),
    /// Generate a synthetic CMS Phase-1 pixel dataset with truth
    Generate(GenerateArgs),
    /// Measure a run against the dataset's truth: efficiencies, fake and duplicate rates,
    /// resolutions, vertex performance, hit residuals (Parquet tables, summary.json and a
    /// self-contained report.html with the plots)
    Report {
        /// Output directory of a `quiver run` of the pixel chain
        #[arg(long, value_name = "RUN_DIR")]
        run: PathBuf,
        /// The dataset the run read (its truth)
        #[arg(long, value_name = "DATASET")]
        truth: PathBuf,
        /// Where to write the report
        #[arg(long, value_name = "DIR")]
        output: PathBuf,
    },
    /// Export a dataset in another program's format
    Export {
        #[command(subcommand)]
        command: ExportCommand,
    },
    /// SQL over a run's products (a command of the Python package's `quiver`)
    Query(PythonOnly),
    /// Run a plan over a dataset on a Dask cluster (a command of the Python package's `quiver`)
    Reconstruct(PythonOnly),
}

/// The arguments of a command that only the Python package's `quiver` implements.
#[derive(Args)]
struct PythonOnly {
    #[arg(trailing_var_arg = true, allow_hyphen_values = true, hide = true)]
    args: Vec<String>,
}

fn python_only(command: &str) -> quiver_columnar::Result<()> {
    Err(quiver_columnar::Error::data(
        format!(
            "`quiver {command}` is a command of the Python package (it runs on DataFusion/Dask): \
             `pip install ./py` (or `maturin develop -m py/Cargo.toml`) and run the `quiver` it installs"
        ),
    ))
}

#[derive(Args)]
struct BenchArgs {
    /// The plan file (TOML); without it, the default plan
    plan: Option<PathBuf>,
    /// Input dataset directory (default: as for `quiver run`)
    #[arg(long, value_name = "DIR")]
    input: Option<PathBuf>,
    /// Events per run
    #[arg(long, value_name = "N")]
    events: Option<u64>,
    /// Replay the input's events from the start when --events asks for more than it holds
    /// (event n reads input event n mod its size): a steady state of many batches per worker
    /// from a small dataset
    #[arg(long)]
    cycle: bool,
    /// Thread counts to scan, comma separated
    #[arg(
        long,
        value_name = "T,T,...",
        value_delimiter = ',',
        default_value = "1,2"
    )]
    threads: Vec<usize>,
    /// Events per batch
    #[arg(long, value_name = "B")]
    batch_size: Option<usize>,
    /// Runs per thread count; the first is a warm-up and is not reported
    #[arg(long, value_name = "R", default_value_t = 2)]
    repeat: usize,
    /// Also write the results as CSV to this file
    #[arg(long, value_name = "FILE")]
    csv: Option<PathBuf>,
}

#[derive(Args)]
struct GenerateArgs {
    /// Events to generate
    #[arg(long, value_name = "N", default_value_t = 100)]
    events: u32,
    /// Mean pile-up ⟨PU⟩ (Poisson)
    #[arg(long, value_name = "MU", default_value_t = 50.0)]
    pileup: f64,
    /// Random seed: the same seed gives byte-identical files for any --threads
    #[arg(long, value_name = "S", default_value_t = 1)]
    seed: u64,
    /// Worker threads (default: the available cores)
    #[arg(long, value_name = "T")]
    threads: Option<usize>,
    /// Output directory (default: the default dataset location, see `quiver run --help`)
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Fraction of FEDs given an injected fault (error words, truncation, bad framing, bit flips)
    #[arg(long, value_name = "F", default_value_t = 0.0)]
    corrupt_fraction: f64,
    /// Never draw a progress bar
    #[arg(long)]
    no_progress: bool,
}

#[derive(Subcommand)]
enum ExportCommand {
    /// Write the binary files pixeltrack-standalone reads (raw.bin, fedIds.bin, beamspot.bin,
    /// cablingMap.bin, gain.bin, cpefast.bin)
    Pixeltrack {
        /// The dataset directory
        #[arg(long, value_name = "DS")]
        input: PathBuf,
        /// Where to write the files
        #[arg(long, value_name = "DIR")]
        output: PathBuf,
    },
}

#[derive(Subcommand)]
enum PlanCommand {
    /// Validate a plan completely and print it resolved (order, inputs, backends)
    Check {
        /// The plan file (TOML)
        plan: PathBuf,
    },
}

#[derive(Args)]
struct RunArgs {
    /// The plan file (TOML); without it, the default plan
    plan: Option<PathBuf>,
    /// Input dataset directory (default for plans that read raw data: the default dataset,
    /// $QUIVER_DATA/default or ~/.cache/quiver/datasets/default, generated on first use)
    #[arg(long, value_name = "DIR")]
    input: Option<PathBuf>,
    /// Output directory (default: ./quiver-out)
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Events to process (default: all events of the input from the first event)
    #[arg(long, value_name = "N")]
    events: Option<u64>,
    /// The first event to process (events keep their numbers in the products); with
    /// --events, runs one partition of a dataset
    #[arg(long, value_name = "N", default_value_t = 0)]
    first_event: u64,
    /// Worker threads (default: the available cores)
    #[arg(long, value_name = "T")]
    threads: Option<usize>,
    /// Events per batch
    #[arg(long, value_name = "B")]
    batch_size: Option<usize>,
    /// Never draw a progress bar
    #[arg(long)]
    no_progress: bool,
}

fn run(args: RunArgs, registry: &Registry) -> quiver_columnar::Result<()> {
    let (resolved, job) = prepare(
        args.plan.as_ref(),
        args.input,
        args.output,
        !args.no_progress,
        registry,
    )?;
    let settings = &resolved.run;
    let opts = RunOptions {
        threads: args
            .threads
            .or(settings.threads)
            .unwrap_or_else(executor::default_threads),
        batch_size: args
            .batch_size
            .or(settings.batch_size)
            .unwrap_or(executor::DEFAULT_BATCH_SIZE),
        first_event: args.first_event,
        events: args.events.or(settings.events),
        progress: !args.no_progress,
        cycle_input: false,
    };
    let origin = args
        .plan
        .as_ref()
        .map_or(default_plan::NAME.to_string(), |p| p.display().to_string());
    // Ctrl-C and SIGTERM stop the job between batches; it then commits nothing and removes
    // its staging directory (main_with prints one line).
    let _signals = quiver_columnar::cancel::SignalGuard::install();
    let (summary, (), committed) = quiver_columnar::rundir::run_job(
        &resolved,
        registry,
        job,
        &origin,
        opts.first_event,
        |steps| Ok((executor::run(&resolved, &steps, &opts)?, ())),
    )?;
    print!("{}", summary.render());
    if let Some(c) = committed {
        println!("{}", c.describe());
    }
    Ok(())
}

/// Loads the plan and the job context as `quiver run` does.
fn prepare(
    plan_path: Option<&PathBuf>,
    input: Option<PathBuf>,
    output: Option<PathBuf>,
    progress: bool,
    registry: &Registry,
) -> quiver_columnar::Result<(plan::ResolvedPlan, JobContext)> {
    let spec = match plan_path {
        Some(p) => PlanSpec::from_file(p)?,
        None => PlanSpec::from_toml(default_plan::TEXT, default_plan::NAME)?,
    };
    let resolved = plan::validate(&spec, registry)?;
    let settings = &resolved.run;
    let output = output.or(settings.output.clone());
    let input = input.or(settings.input.clone());
    // A bar only while the default dataset is generated on first use (made at the first
    // event written, so a dataset already there draws nothing).
    let bar = std::cell::OnceCell::new();
    let job = crate::job_context_with_progress(&resolved, input, output, &|done, events| {
        bar.get_or_init(|| progress_bar(events, progress))
            .set_position(done)
    });
    if let Some(bar) = bar.get() {
        bar.finish_and_clear();
    }
    Ok((resolved, job?))
}

/// A bench run shorter than this is mostly thread start-up and warm-up: its speed-up says
/// little (20 events of the local plan on 2 threads showed 0.99×).
const SHORT_BENCH_RUN: std::time::Duration = std::time::Duration::from_secs(1);

/// The scratch output directory of `quiver bench`, removed however the bench ends.
struct Scratch(PathBuf);

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn bench(args: BenchArgs, registry: &Registry) -> quiver_columnar::Result<()> {
    let tmp = Scratch(std::env::temp_dir().join(format!("quiver-bench-{}", std::process::id())));
    let (resolved, job) = prepare(
        args.plan.as_ref(),
        args.input,
        Some(tmp.0.clone()),
        true,
        registry,
    )?;
    let job = std::sync::Arc::new(job);
    // Ctrl-C and SIGTERM stop the run in progress between batches, as in `quiver run`.
    let _signals = quiver_columnar::cancel::SignalGuard::install();
    let mut rows: Vec<(usize, executor::Summary)> = Vec::new();
    for &threads in &args.threads {
        for rep in 0..args.repeat.max(1) {
            let steps = resolved.build(registry, job.clone())?;
            let opts = RunOptions {
                threads,
                batch_size: args
                    .batch_size
                    .or(resolved.run.batch_size)
                    .unwrap_or(executor::DEFAULT_BATCH_SIZE),
                first_event: 0,
                events: args.events.or(resolved.run.events),
                progress: false,
                cycle_input: args.cycle,
            };
            let s = executor::run(&resolved, &steps, &opts).map_err(|e| match e {
                quiver_columnar::Error::Usage(m)
                    if !args.cycle && m.contains("but the input has") =>
                {
                    quiver_columnar::Error::Usage(format!("{m}; or --cycle to replay them"))
                }
                quiver_columnar::Error::Interrupted(_) => {
                    quiver_columnar::Error::Interrupted(format!(
                        "the bench stopped during its run at {threads} threads; \
                         no results (its scratch output was removed)"
                    ))
                }
                e => e,
            })?;
            if rep > 0 || args.repeat <= 1 {
                rows.push((threads, s));
            }
        }
    }
    drop(tmp);
    let (out, csv) = bench_tables(&rows);
    print!("{out}");
    if let Some(path) = args.csv {
        std::fs::write(&path, csv).map_err(|e| quiver_columnar::Error::io(&path, e))?;
    }
    Ok(())
}

/// The bench's printed tables and its CSV, from the measured runs.
fn bench_tables(rows: &[(usize, executor::Summary)]) -> (String, String) {
    use std::fmt::Write;
    let mut out = String::new();
    let mut csv =
        String::from("threads,batch_size,events,wall_s,events_per_s,step,type,ms_per_event\n");
    let _ = writeln!(
        out,
        "{:>7} {:>6} {:>8} {:>10} {:>12} {:>8}",
        "threads", "batch", "events", "wall s", "events/s", "speed-up"
    );
    let base = rows.first().map(|(_, s)| s.throughput()).unwrap_or(1.0);
    for (t, s) in rows {
        let _ = writeln!(
            out,
            "{:>7} {:>6} {:>8} {:>10.3} {:>12.2} {:>8.2}",
            t,
            s.batch_size,
            s.events,
            s.wall.as_secs_f64(),
            s.throughput(),
            s.throughput() / base
        );
        for st in &s.steps {
            let ms = 1e3 * st.time.as_secs_f64() / s.events.max(1) as f64;
            let _ = writeln!(
                csv,
                "{t},{},{},{:.6},{:.3},{},{},{ms:.4}",
                s.batch_size,
                s.events,
                s.wall.as_secs_f64(),
                s.throughput(),
                st.label,
                st.type_name
            );
        }
    }
    let _ = writeln!(
        out,
        "\nms/event in each step (wall time of its calls, summed over workers):"
    );
    let _ = write!(out, "{:<20}", "step");
    for (t, _) in rows {
        let _ = write!(out, " {:>9}", format!("{t} thr"));
    }
    out.push('\n');
    if let Some((_, first)) = rows.first() {
        for (i, st) in first.steps.iter().enumerate() {
            let _ = write!(out, "{:<20}", st.label);
            for (_, s) in rows {
                let _ = write!(
                    out,
                    " {:>9.3}",
                    1e3 * s.steps[i].time.as_secs_f64() / s.events.max(1) as f64
                );
            }
            out.push('\n');
        }
    }
    if rows.iter().any(|(_, s)| s.wall < SHORT_BENCH_RUN) {
        let _ = writeln!(
            out,
            "\nnote: runs under {} s measure start-up more than throughput; for longer runs, more \
             events (--events N, with --cycle to replay the input)",
            SHORT_BENCH_RUN.as_secs()
        );
    }
    (out, csv)
}

fn generate(g: GenerateArgs) -> quiver_columnar::Result<()> {
    let opts = quiver_datasets::GenerateOptions {
        events: g.events,
        pileup: g.pileup,
        seed: g.seed,
        threads: g.threads,
        output: g.output.unwrap_or_else(crate::default_dataset_dir),
        corrupt_fraction: g.corrupt_fraction,
    };
    let bar = progress_bar(u64::from(g.events), !g.no_progress);
    let s = crate::generate_dataset_with_progress(&opts, &|done| bar.set_position(done));
    // Cleared on an error too, so that the error line stands alone.
    bar.finish_and_clear();
    let s = s?;
    let out = opts.output.display();
    println!(
        "generated {} events at <PU> {} (seed {}) into {out} in {:.2} s ({:.1} events/s)\n\
         per event: {:.0} FED words, {:.0} modules with digis, {:.0} pixels, {:.0} clusters\n\
         next: quiver run --input {out}",
        s.events,
        opts.pileup,
        opts.seed,
        s.seconds,
        s.events_per_second,
        s.words_per_event,
        s.modules_with_hits,
        s.pixels_per_event,
        s.clusters_per_event
    );
    Ok(())
}

/// A bar of `events` on stderr when `wanted` and stderr is a terminal (as `quiver run`
/// draws one); otherwise a hidden one, so that logs and pipes get no control characters.
fn progress_bar(events: u64, wanted: bool) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !wanted || !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(events);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("{bar:40} {pos}/{len} events  {rate}  eta {eta}")
    {
        bar.set_style(style.with_key(
            "rate",
            |s: &indicatif::ProgressState, w: &mut dyn std::fmt::Write| {
                let _ = write!(w, "{:.1} events/s", s.per_sec());
            },
        ));
    }
    // Drawn from the start, and its rate and ETA kept current between chunks.
    bar.enable_steady_tick(std::time::Duration::from_millis(250));
    bar
}

/// Runs the command line `args` (program name first) with the step types of `registry`.
/// The `quiver` binary and the Python package's `quiver` command both call this.
pub fn main_with<I, T>(args: I, registry: &Registry) -> ExitCode
where
    I: IntoIterator<Item = T>,
    T: Into<std::ffi::OsString> + Clone,
{
    let cli = match Cli::try_parse_from(args) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = e.print();
            return if e.use_stderr() {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let result = match cli.command {
        Command::Run(args) => run(args, registry),
        Command::Bench(args) => bench(args, registry),
        Command::Steps => {
            print!("{}", registry.describe());
            Ok(())
        }
        Command::Plan {
            command: PlanCommand::Check { plan: path },
        } => PlanSpec::from_file(&path)
            .and_then(|spec| plan::validate(&spec, registry))
            .map(|resolved| {
                println!(
                    "{}: valid, {} steps in this order:",
                    path.display(),
                    resolved.steps.len()
                );
                print!("{}", resolved.describe());
            }),
        Command::Generate(g) => generate(g),
        Command::Report { run, truth, output } => {
            quiver_validation::truth::report(&run, &truth, &output)
                .map(|summary| {
                    println!("{}", summary.to_json());
                    println!("report written to {}", output.display());
                })
                .map_err(|e| quiver_columnar::Error::data(e.to_string()))
        }
        Command::Export {
            command: ExportCommand::Pixeltrack { input, output },
        } => quiver_datasets::export_pixeltrack(&input, &output)
            .map(|()| {
                println!(
                    "wrote pixeltrack-standalone inputs of {} to {}",
                    input.display(),
                    output.display()
                )
            })
            .map_err(|e| quiver_columnar::Error::data(e.to_string())),
        Command::Query(_) => python_only("query"),
        Command::Reconstruct(_) => python_only("reconstruct"),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        // One line, no error: the user asked for it. 128 + the signal, as a shell reports
        // a process the signal killed.
        Err(e @ quiver_columnar::Error::Interrupted(_)) => {
            eprintln!("quiver: {e}");
            ExitCode::from(
                128 + quiver_columnar::cancel::take_signal()
                    .unwrap_or(2)
                    .clamp(1, 127) as u8,
            )
        }
        // A plan error's text starts with "plan error:" already; "error: plan error:" said
        // it twice.
        Err(e) if e.is_plan_error() => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
        // A run option that cannot be honoured is a usage error, like clap's (exit code 2).
        Err(e @ quiver_columnar::Error::Usage(_)) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
