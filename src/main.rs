//! The `quiver` command line.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};
use quiver::{default_plan, registry};
use quiver_columnar::{executor, plan, JobContext, PlanSpec, RunOptions};

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
    /// Input dataset directory
    #[arg(long, value_name = "DIR")]
    input: Option<PathBuf>,
    /// Output directory (default: ./quiver-out)
    #[arg(long, value_name = "DIR")]
    output: Option<PathBuf>,
    /// Events to process (default: all events of the input)
    #[arg(long, value_name = "N")]
    events: Option<u64>,
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

fn run(args: RunArgs) -> quiver_columnar::Result<()> {
    let spec = match &args.plan {
        Some(p) => PlanSpec::from_file(p)?,
        None => PlanSpec::from_toml(default_plan::TEXT, default_plan::NAME)?,
    };
    let registry = registry();
    let resolved = plan::validate(&spec, &registry)?;
    let settings = &resolved.run;
    let output = args.output.or(settings.output.clone()).unwrap_or_else(|| PathBuf::from("quiver-out"));
    let input = args.input.or(settings.input.clone());
    let job = JobContext { input, output: output.clone(), conditions: Default::default() };
    let steps = resolved.build(&registry, job.into())?;
    let opts = RunOptions {
        threads: args.threads.or(settings.threads).unwrap_or_else(executor::default_threads),
        batch_size: args.batch_size.or(settings.batch_size).unwrap_or(executor::DEFAULT_BATCH_SIZE),
        events: args.events.or(settings.events),
        progress: !args.no_progress,
    };
    let summary = executor::run(&resolved, &steps, &opts)?;
    print!("{}", summary.render());
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Run(args) => run(args),
        Command::Steps => {
            print!("{}", registry().describe());
            Ok(())
        }
        Command::Plan { command: PlanCommand::Check { plan: path } } => PlanSpec::from_file(&path)
            .and_then(|spec| plan::validate(&spec, &registry()))
            .map(|resolved| {
                println!("{}: valid, {} steps in this order:", path.display(), resolved.steps.len());
                print!("{}", resolved.describe());
            }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::FAILURE
        }
    }
}
