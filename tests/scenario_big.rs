//! A generated cluster bigger than serde-saphyr's default budget (250,000 YAML nodes) loads:
//! the budget guards against YAML bombs, and grows with the file's length.

use nfsim::scenario::load_str;

#[test]
fn a_scenario_of_more_than_250000_yaml_nodes_loads() {
    let mut s = String::from("name: big\nduration: 1m\nnodes:\n");
    let nodes = 170;
    for n in 0..nodes {
        s.push_str(&format!(
            "  - {{name: n{n}, address: 192.168.0.{}, podCIDR: 10.{}.{}.0/24}}\n",
            n + 1,
            100 + n / 250,
            n % 250
        ));
    }
    s.push_str("pods:\n");
    let mut yaml_nodes = 0;
    for n in 0..nodes {
        for p in 0..250 {
            s.push_str(&format!(
                "  - {{name: p{n}x{p}, node: n{n}, ip: 10.{}.{}.{}}}\n",
                100 + n / 250,
                n % 250,
                p + 2
            ));
            yaml_nodes += 7;
        }
    }
    assert!(yaml_nodes > 250_000);
    let sc = load_str("big.yaml", &s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(sc.pods.len(), nodes * 250);
}
