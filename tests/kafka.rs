//! Kafka against a real broker: tansu (see `tests/common/broker.rs`), one per test.
//! Needs `TANSU_BIN` (scripts/test.sh installs tansu and exports it).

mod common;

use std::net::TcpStream;
use std::time::Duration;

use common::broker::Broker;

#[test]
fn a_broker_listens_on_loopback_and_is_gone_after_drop() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap();
    assert_eq!(bootstrap, format!("127.0.0.1:{}", broker.port()));
    assert!(
        broker.startup < Duration::from_secs(5),
        "startup {:?}",
        broker.startup
    );
    eprintln!("tansu listening after {:?}", broker.startup);
    let addr = bootstrap.parse().expect("socket address");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(1)).is_ok());
    drop(broker);
    assert!(TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err());
}
