//! PLACEHOLDER (lead): replaced by the real command.
pub fn run(args: crate::cli::ReplayArgs) -> anyhow::Result<std::process::ExitCode> {
    let trace = fctrace_format::store::Trace::open(&args.dir)?;
    crate::output::tree::print_tree(&trace, &mut std::io::stdout())?;
    Ok(std::process::ExitCode::SUCCESS)
}
