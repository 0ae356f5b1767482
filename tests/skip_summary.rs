//! The line that ends `cargo test --workspace` naming the real-tool comparisons that skipped
//! (`tests/support/skips.rs`): what it says for a run's records, and that a record can only
//! belong to the run of a live cargo.

#[path = "support/skips.rs"]
#[allow(dead_code)]
mod skips;

#[test]
fn the_summary_groups_skips_by_reason_and_counts_the_comparisons_that_ran() {
    let records = "\
kernel_diff::udp_matches\tconntrack missing
kernel_diff::tcp_matches\tconntrack missing
report::the_page_opens\tchromium missing
kernel_lab::udp_timeline\t
kernel_diff::udp_matches\tconntrack missing
";
    assert_eq!(
        skips::summary_of(records).unwrap(),
        "real-tool comparisons: 1 ran, 3 skipped (NFSIM_REQUIRE_KERNEL_LAB=1 makes a skip fail): \
         chromium missing: report::the_page_opens; \
         conntrack missing: kernel_diff::tcp_matches, kernel_diff::udp_matches"
    );
}

#[test]
fn a_run_where_every_comparison_ran_says_so_and_a_run_without_any_says_nothing() {
    assert_eq!(
        skips::summary_of("a::x\t\nb::y\t\na::x\t\n").unwrap(),
        "real-tool comparisons: all 2 ran, none skipped"
    );
    assert_eq!(skips::summary_of(""), None);
}

#[test]
fn a_test_that_skipped_one_of_its_cases_counts_as_skipped() {
    let records = "t::render\t\nt::render\tnft missing\n";
    assert_eq!(
        skips::summary_of(records).unwrap(),
        "real-tool comparisons: 0 ran, 1 skipped (NFSIM_REQUIRE_KERNEL_LAB=1 makes a skip fail): nft missing: t::render"
    );
}

#[test]
fn this_test_runs_under_a_live_cargo_whose_id_no_other_process_has() {
    // Under `cargo test` the run is this binary's parent cargo; its id names the records.
    let Some(run) = skips::run_id() else {
        // Started by hand (no cargo above): nothing is recorded, nothing to check.
        return;
    };
    let (pid, start) = run.split_once('-').unwrap();
    assert!(
        pid.parse::<u32>().is_ok() && start.parse::<u64>().is_ok(),
        "{run}"
    );
    assert!(skips::run_alive(&run), "{run}");
    // The same pid with another start time is an earlier run: gone.
    let other = format!("{pid}-{}", start.parse::<u64>().unwrap() + 1);
    assert!(!skips::run_alive(&other));
}
