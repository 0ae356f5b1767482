#[test]
fn an_entry_is_one_cache_line_and_a_timer_twelve_bytes() {
    assert_eq!(std::mem::size_of::<super::Entry>(), 64);
    assert_eq!(std::mem::align_of::<super::Entry>(), 64);
    assert_eq!(std::mem::size_of::<std::cmp::Reverse<super::Timer>>(), 12);
}
