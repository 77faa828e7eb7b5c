//! The documentation's examples are tests: every ```` ```console ```` block of README.md and of every page under
//! docs/ (docs/reference/ included) is run with trycmd from the repository root, and its output must match: `$ `
//! starts a command (`> ` continues it), `? 3` after it expects that exit status (default 0), stdout and stderr
//! are shown together, `...` on a line of its own stands for lines left out and `[..]` for the rest of a line. Only
//! `tiergate` runs (the binary this crate builds); blocks of any other language (```sh, ```yaml, ```text) never do.
//!
//! Each page runs from a copy under the test's target tmpdir (`doc-commands/`, kept for reading) that differs from
//! it in two ways trycmd needs, line for line where it can: a fence without a language (which trycmd would run)
//! reads ```` ```text ````, and a command whose output is written to its last line gets the empty line trycmd
//! expects after it (taken from the empty line after the block when there is one). Failures name the copy; its
//! line numbers are the page's unless one block holds several commands.

#![cfg(test)]

use std::path::{Path, PathBuf};

fn repository() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..").canonicalize().unwrap()
}

/// README.md and every `.md` file under docs/, sorted.
fn documentation_pages(root: &Path) -> Vec<PathBuf> {
    fn walk(dir: &Path, pages: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                walk(&path, pages);
            } else if path.extension().is_some_and(|extension| extension == "md") {
                pages.push(path);
            }
        }
    }
    let mut pages = vec![root.join("README.md")];
    walk(&root.join("docs"), &mut pages);
    pages.sort();
    pages
}

/// The page as trycmd needs to read it: fences without a language labelled `text`, and an empty line after each
/// console command's output that does not end with `...` or one already (see the module's comment).
fn prepare_page(text: &str) -> String {
    let lines: Vec<&str> = text.split_inclusive('\n').collect();
    let mut out: Vec<String> = Vec::new();
    // The open block's fence and whether it is a console block.
    let mut open: Option<(String, bool)> = None;
    let mut index = 0;
    while index < lines.len() {
        let line = lines[index];
        index += 1;
        let ticks = line.chars().take_while(|c| *c == '`').count();
        match &open {
            None if ticks >= 3 => {
                let info = line[ticks..].trim();
                let mut words = info.split(',');
                let console = matches!(words.next(), Some("console" | "trycmd")) && !words.any(|word| word == "ignore");
                open = Some((line[..ticks].to_owned(), console));
                if info.is_empty() {
                    out.push(format!("{}text{}", &line[..ticks], &line[ticks..]));
                    continue;
                }
            }
            Some((fence, console)) if line.starts_with(fence.as_str()) => {
                if *console && ends_with_exact_output(&out) {
                    out.push("\n".to_owned());
                    // The empty line after the block moves inside it, so later lines keep their numbers.
                    if lines.get(index).is_some_and(|next| next.trim().is_empty()) {
                        index += 1;
                    }
                }
                open = None;
            }
            Some((_, true)) if line.starts_with("$ ") && ends_with_exact_output(&out) => out.push("\n".to_owned()),
            _ => {}
        }
        out.push(line.to_owned());
    }
    out.concat()
}

/// Whether the last line of `out` is a command's output written to its end: not empty, not `...`, and not the
/// command's own `$ `, `> ` or `? ` line.
fn ends_with_exact_output(out: &[String]) -> bool {
    let last = out.last().map(|line| line.trim_end()).unwrap_or_default();
    !(last.is_empty() || last == "..." || ["$ ", "> ", "? ", "```"].iter().any(|prefix| last.starts_with(prefix)))
}

#[test]
fn every_console_example_in_the_readme_and_docs_runs_as_shown() {
    let root = repository();
    // trycmd runs a Markdown page's commands in the test's working directory: the repository root, where the
    // examples' paths (samples/...) are relative to. No other test of this binary depends on the directory.
    std::env::set_current_dir(&root).unwrap();
    let copies = Path::new(env!("CARGO_TARGET_TMPDIR")).join("doc-commands");
    let _ = std::fs::remove_dir_all(&copies);
    let cases = trycmd::TestCases::new();
    cases.register_bin("tiergate", PathBuf::from(env!("CARGO_BIN_EXE_tiergate"))).env("NO_COLOR", "1");
    let mut console_pages = 0;
    for page in documentation_pages(&root) {
        let text = std::fs::read_to_string(&page).unwrap();
        console_pages += usize::from(text.lines().any(|line| line.starts_with("```console")));
        let copy = copies.join(page.strip_prefix(&root).unwrap());
        std::fs::create_dir_all(copy.parent().unwrap()).unwrap();
        std::fs::write(&copy, prepare_page(&text)).unwrap();
        cases.case(copy);
    }
    eprintln!("running the console blocks of {} from their copies under {}", root.display(), copies.display());
    assert!(console_pages >= 1, "no page has a ```console block: docs/reference/commands.md should");
    cases.run();
}

#[test]
fn a_fence_without_a_language_is_labelled_text_and_every_other_fence_is_kept() {
    let page = "intro\n```\nlayout\n```\n```sh\n$ tiergate crd\n```\n````\n```\n````\n";
    let prepared = prepare_page(page);
    assert_eq!(prepared, "intro\n```text\nlayout\n```\n```sh\n$ tiergate crd\n```\n````text\n```\n````\n");
}

#[test]
fn exact_output_gets_the_empty_line_trycmd_expects_keeping_line_numbers_where_it_can() {
    let page = "```console\n$ tiergate a\nlast\n```\n\nnext\n";
    assert_eq!(prepare_page(page), "```console\n$ tiergate a\nlast\n\n```\nnext\n");
    let elided = "```console\n$ tiergate a\n...\n```\n\n```console\n$ tiergate b\n? 3\n```\n";
    assert_eq!(prepare_page(elided), elided, "`...`, a status line or no output need nothing");
    let written = "```console\n$ tiergate a\nlast\n\n```\n";
    assert_eq!(prepare_page(written), written, "trycmd's own form is kept");
    let two = "```console\n$ tiergate a\nout\n$ tiergate b\nout\n```";
    assert_eq!(prepare_page(two), "```console\n$ tiergate a\nout\n\n$ tiergate b\nout\n\n```");
}
