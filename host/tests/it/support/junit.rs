//! Reading the JUnit XML `hyperplug conformance --junit` writes.

/// Each testcase of a JUnit document: (name, verdict, message).
pub fn cases(xml: &str) -> Vec<(String, &'static str, String)> {
    let doc = roxmltree::Document::parse(xml).expect("the JUnit file is well-formed XML");
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suite = root
        .children()
        .find(|n| n.has_tag_name("testsuite"))
        .expect("a testsuite");
    let cases: Vec<_> = suite
        .children()
        .filter(|n| n.has_tag_name("testcase"))
        .map(|c| {
            let name = c.attribute("name").expect("testcase name").to_string();
            assert!(c.attribute("time").is_some(), "{name} has a time");
            let child = |tag: &str| c.children().find(|n| n.has_tag_name(tag));
            let (verdict, message) = match (child("failure"), child("skipped")) {
                (Some(f), _) => ("fail", f.attribute("message").unwrap_or("").to_string()),
                (None, Some(s)) => ("skip", s.attribute("message").unwrap_or("").to_string()),
                (None, None) => ("pass", String::new()),
            };
            (name, verdict, message)
        })
        .collect();
    let count = |attr: &str| suite.attribute(attr).unwrap().parse::<usize>().unwrap();
    assert_eq!(count("tests"), cases.len());
    assert_eq!(
        count("failures"),
        cases.iter().filter(|c| c.1 == "fail").count()
    );
    assert_eq!(
        count("skipped"),
        cases.iter().filter(|c| c.1 == "skip").count()
    );
    cases
}
