//! A tokio service: it starts two client processes, each with a shmrc channel, and
//! serves both at once, one task per client. A request carries a buffer of numbers
//! (file_descriptor, zero-copy); the reply carries their sum and a frozen buffer of
//! the running totals the service computed.
//!
//! `cargo run --example tokio_service --features tokio`

use std::process::Command;

use serde::{Deserialize, Serialize};
use shmrc::channel::{self, AsyncReceiver, AsyncSender};
use shmrc::{FrozenBuf, ShmBuf, ShmBufMut};

#[derive(Serialize, Deserialize)]
struct Request {
    client: u32,
    numbers: ShmBuf,
}

#[derive(Serialize, Deserialize)]
struct Reply {
    sum: u64,
    running: FrozenBuf,
}

const REQUESTS: u64 = 5;
const LEN: usize = 1000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    if std::env::args().nth(1).as_deref() == Some("client") {
        return client();
    }
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(serve())
}

async fn serve() -> Result<(), Box<dyn std::error::Error>> {
    let mut tasks = Vec::new();
    for client in 0..2u32 {
        let mut command = Command::new(std::env::current_exe()?);
        command.arg("client").env("CLIENT_ID", client.to_string());
        let (child, replies, requests) = channel::spawn::<Reply, Request>(&mut command)?;
        let (replies, requests) = (AsyncSender::new(replies), AsyncReceiver::new(requests)?);
        tasks.push(tokio::spawn(async move {
            let mut served = 0;
            loop {
                let request = match requests.recv().await {
                    Ok(request) => request,
                    Err(shmrc::Error::Disconnected) => break,
                    Err(e) => return Err(e),
                };
                let mut numbers = vec![0u64; request.numbers.len() / 8];
                request.numbers.read_items(0, &mut numbers)?;
                let mut running = ShmBufMut::new(numbers.len() * 8)?;
                let mut total = 0;
                for (out, n) in running.cast_mut::<u64>()?.iter_mut().zip(&numbers) {
                    total += n;
                    *out = total;
                }
                replies
                    .send(Reply {
                        sum: total,
                        running: running.freeze()?,
                    })
                    .await?;
                served += 1;
                assert_eq!(request.client, client);
            }
            Ok::<_, shmrc::Error>((child, served))
        }));
    }
    for task in tasks {
        let (mut child, served) = task.await??;
        assert!(child.wait()?.success());
        println!("client {} served {served} requests", child.id());
        assert_eq!(served, REQUESTS);
    }
    println!("both clients served concurrently on one runtime");
    Ok(())
}

/// A client: sends REQUESTS buffers of numbers and checks each reply.
fn client() -> Result<(), Box<dyn std::error::Error>> {
    let client: u32 = std::env::var("CLIENT_ID")?.parse()?;
    let (requests, replies) = channel::from_parent::<Request, Reply>()?;
    for round in 0..REQUESTS {
        let numbers = ShmBuf::new(LEN * 8)?;
        let values: Vec<u64> = (0..LEN as u64).map(|i| i + round).collect();
        numbers.write_items(0, &values)?;
        requests.send(&Request { client, numbers })?;
        let reply = replies.recv()?;
        assert_eq!(reply.sum, values.iter().sum::<u64>());
        assert_eq!(reply.running.cast::<u64>()?[LEN - 1], reply.sum);
    }
    Ok(())
}
