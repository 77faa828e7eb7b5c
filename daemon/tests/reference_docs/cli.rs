//! docs/reference/cli.md: every command and flag with its environment variable, default and help, walked from
//! the clap definition `main` parses with (`tiergate::cli::Cli`), and each command's exit statuses.

use clap::CommandFactory;
use tiergate::cli::{Cli, PLUGIN_BINARY, exit_statuses};

use super::markdown::{cell, code, generated_line, table};

pub fn build_cli_reference() -> String {
    let mut command = Cli::command();
    command.build();
    let mut out = generated_line("the command line's definition (`tiergate --help`)");
    out.push_str("\n# Command-line reference\n\n");
    out.push_str(&format!(
        "{}\n\nEvery flag can also be set in the environment as `TIERGATE_<FLAG>`: its long name upper-cased, `-` as \
         `_` (`--policy-name` is `TIERGATE_POLICY_NAME`); a flag on the command line wins. Linked or installed as \
         `{PLUGIN_BINARY}`, the binary is the kubectl plugin: `kubectl tiergate status`, `kubectl tiergate why`.\n",
        command.get_about().map(ToString::to_string).unwrap_or_default()
    ));
    out.push_str("\n## Global flags\n\n");
    out.push_str(&flag_table(&command, true));
    out.push_str(&format!("\n### Exit status\n\n{}", exit_table(None)));
    for sub in command.get_subcommands() {
        let name = sub.get_name();
        out.push_str(&format!("\n## `tiergate {name}`\n\n"));
        let about = sub.get_long_about().or(sub.get_about()).map(ToString::to_string).unwrap_or_default();
        out.push_str(&format!("{}\n\n", about.trim()));
        let usage = sub.clone().render_usage().to_string();
        out.push_str(&format!("{}\n\n", code(usage.trim().trim_start_matches("Usage: "))));
        out.push_str(&flag_table(sub, false));
        out.push_str(&format!("\n### Exit status\n\n{}", exit_table(Some(name))));
    }
    out
}

/// The flags and operands of `command` (`global`: only the global ones, which every command takes).
fn flag_table(command: &clap::Command, global: bool) -> String {
    let rows: Vec<Vec<String>> = command
        .get_arguments()
        .filter(|arg| arg.is_global_set() == global || matches!(arg.get_id().as_str(), "help" | "version") && global)
        .filter(|arg| global || !matches!(arg.get_id().as_str(), "help" | "version"))
        .map(|arg| {
            vec![
                code(&spelling(arg)),
                code(&arg.get_env().map(|env| env.to_string_lossy().into_owned()).unwrap_or_default()),
                code(
                    &arg.get_default_values().iter().map(|value| value.to_string_lossy()).collect::<Vec<_>>().join(","),
                ),
                cell(&help(arg)),
            ]
        })
        .collect();
    table(&["Flag", "Environment", "Default", "Description"], &rows)
}

/// How a user writes the argument: `-o, --output <OUTPUT>` (with its aliases), or `<WORKLOAD>` for an operand.
fn spelling(arg: &clap::Arg) -> String {
    let value = match arg.get_value_names() {
        Some(names) => names.iter().map(|name| format!("<{name}>")).collect::<Vec<_>>().join(" "),
        None => format!("<{}>", arg.get_id().as_str().to_uppercase()),
    };
    let takes_value = arg.get_num_args().is_some_and(|range| range.takes_values());
    let Some(long) = arg.get_long() else { return value };
    let mut names: Vec<String> = arg.get_short().map(|short| format!("-{short}")).into_iter().collect();
    names.push(format!("--{long}"));
    names.extend(arg.get_visible_aliases().into_iter().flatten().map(|alias| format!("--{alias}")));
    let names = names.join(", ");
    if takes_value { format!("{names} {value}") } else { names }
}

/// The argument's help, then its possible values with theirs.
fn help(arg: &clap::Arg) -> String {
    let mut text = arg.get_long_help().or(arg.get_help()).map(ToString::to_string).unwrap_or_default();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|value| !value.is_hide_set())
        .map(|value| match value.get_help() {
            Some(help) => format!("`{}` ({})", value.get_name(), help.to_string().trim_end_matches('.')),
            None => format!("`{}`", value.get_name()),
        })
        .collect();
    let is_bool = values.len() == 2 && values.iter().all(|value| value == "`true`" || value == "`false`");
    if !values.is_empty() && !is_bool {
        text = format!("{}. One of: {}", text.trim_end_matches('.'), values.join(", "));
    }
    text
}

/// The exit statuses table of `subcommand` (`None`: the top-level command).
fn exit_table(subcommand: Option<&str>) -> String {
    let rows: Vec<Vec<String>> = exit_statuses(subcommand)
        .into_iter()
        .map(|(exit, meaning)| vec![exit.code().to_string(), cell(meaning)])
        .collect();
    table(&["Status", "Meaning"], &rows)
}
