//! Verdicts: one per case, printed as a table and written as JUnit XML.
use std::fmt::Write as _;
use std::time::{Duration, Instant};

/// `1 call`, `3 calls`: counts in verdicts read as prose.
pub fn calls(n: usize) -> String {
    if n == 1 {
        "1 call".into()
    } else {
        format!("{n} calls")
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    Pass(String),
    Fail(String),
    Skip(String),
}

impl Verdict {
    pub fn label(&self) -> &'static str {
        match self {
            Verdict::Pass(_) => "pass",
            Verdict::Fail(_) => "FAIL",
            Verdict::Skip(_) => "skip",
        }
    }
    pub fn detail(&self) -> &str {
        match self {
            Verdict::Pass(d) | Verdict::Fail(d) | Verdict::Skip(d) => d,
        }
    }
}

#[derive(Debug, Clone)]
pub struct CaseResult {
    pub name: &'static str,
    pub about: &'static str,
    pub verdict: Verdict,
    pub elapsed: Duration,
}

/// Everything one run found.
#[derive(Debug, Default)]
pub struct Report {
    pub suite: String,
    pub properties: Vec<(String, String)>,
    pub cases: Vec<CaseResult>,
}

impl Report {
    pub fn new(suite: String, properties: Vec<(String, String)>) -> Report {
        Report {
            suite,
            properties,
            cases: vec![],
        }
    }

    /// Run one case, timing it; print its line as soon as it is known.
    pub async fn run(
        &mut self,
        name: &'static str,
        about: &'static str,
        case: impl Future<Output = Verdict>,
    ) -> Verdict {
        let started = Instant::now();
        let verdict = case.await;
        let result = CaseResult {
            name,
            about,
            verdict: verdict.clone(),
            elapsed: started.elapsed(),
        };
        if self.cases.is_empty() {
            println!("{}", header());
        }
        println!("{}", line(&result));
        self.cases.push(result);
        verdict
    }

    pub fn skip(&mut self, name: &'static str, about: &'static str, reason: String) {
        let result = CaseResult {
            name,
            about,
            verdict: Verdict::Skip(reason),
            elapsed: Duration::ZERO,
        };
        if self.cases.is_empty() {
            println!("{}", header());
        }
        println!("{}", line(&result));
        self.cases.push(result);
    }

    pub fn count(&self, label: &str) -> usize {
        self.cases
            .iter()
            .filter(|c| c.verdict.label() == label)
            .count()
    }

    pub fn failed(&self) -> bool {
        self.count("FAIL") > 0
    }

    /// `N passed, N failed, N skipped`, alone on its line.
    pub fn summary(&self) -> String {
        format!(
            "{} passed, {} failed, {} skipped",
            self.count("pass"),
            self.count("FAIL"),
            self.count("skip")
        )
    }

    /// JUnit XML as CI systems read it. Hand-written: the format is a few elements and
    /// the crate needs no XML library for anything else.
    pub fn junit(&self) -> String {
        let total: f64 = self.cases.iter().map(|c| c.elapsed.as_secs_f64()).sum();
        let (n, failed, skipped) = (self.cases.len(), self.count("FAIL"), self.count("skip"));
        let suite = esc(&self.suite);
        let mut x = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
        let _ = writeln!(
            x,
            "<testsuites name=\"hyperplug conformance\" tests=\"{n}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skipped}\" time=\"{total:.3}\">"
        );
        let _ = writeln!(
            x,
            "  <testsuite name=\"{suite}\" tests=\"{n}\" failures=\"{failed}\" errors=\"0\" skipped=\"{skipped}\" time=\"{total:.3}\">"
        );
        x.push_str("    <properties>\n");
        for (k, v) in &self.properties {
            let _ = writeln!(
                x,
                "      <property name=\"{}\" value=\"{}\"/>",
                esc(k),
                esc(v)
            );
        }
        x.push_str("    </properties>\n");
        for c in &self.cases {
            let _ = write!(
                x,
                "    <testcase name=\"{}\" classname=\"{suite}\" time=\"{:.3}\">",
                esc(c.name),
                c.elapsed.as_secs_f64()
            );
            let detail = esc(c.verdict.detail());
            match &c.verdict {
                Verdict::Pass(_) => {}
                Verdict::Fail(_) => {
                    let _ = write!(
                        x,
                        "\n      <failure message=\"{detail}\" type=\"conformance\">{}: {detail}</failure>\n    ",
                        esc(c.about)
                    );
                }
                Verdict::Skip(_) => {
                    let _ = write!(x, "\n      <skipped message=\"{detail}\"/>\n    ");
                }
            }
            if matches!(c.verdict, Verdict::Pass(_)) {
                let _ = write!(x, "\n      <system-out>{detail}</system-out>\n    ");
            }
            x.push_str("</testcase>\n");
        }
        x.push_str("  </testsuite>\n</testsuites>\n");
        x
    }
}

const NAME_WIDTH: usize = 34;

fn header() -> String {
    format!(
        "{:<NAME_WIDTH$} {:<6} {:>8}  DETAIL",
        "CASE", "RESULT", "TIME"
    )
}

fn line(c: &CaseResult) -> String {
    format!(
        "{:<NAME_WIDTH$} {:<6} {:>7.2}s  {}",
        c.name,
        c.verdict.label(),
        c.elapsed.as_secs_f64(),
        c.verdict.detail()
    )
}

/// Escape text for XML attributes and content; drop characters XML 1.0 forbids.
fn esc(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for ch in s.chars() {
        match ch {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            c if (c as u32) < 0x20 && c != '\t' && c != '\r' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn junit_escapes_and_counts() {
        let mut r = Report::new(
            "conformance.x".into(),
            vec![("plugin".into(), "a&b".into())],
        );
        for (name, v) in [
            ("a", Verdict::Pass("ok <1>".into())),
            ("b", Verdict::Fail("bad \"q\"\u{1}".into())),
            ("c", Verdict::Skip("why".into())),
        ] {
            r.cases.push(CaseResult {
                name,
                about: "about",
                verdict: v,
                elapsed: Duration::from_millis(5),
            });
        }
        let x = r.junit();
        assert!(x.contains("tests=\"3\" failures=\"1\" errors=\"0\" skipped=\"1\""));
        assert!(x.contains("value=\"a&amp;b\""));
        assert!(x.contains("<failure message=\"bad &quot;q&quot;\""));
        assert!(x.contains("<skipped message=\"why\"/>"));
        assert!(x.contains("ok &lt;1&gt;"));
        assert_eq!(r.summary(), "1 passed, 1 failed, 1 skipped");
    }
}
