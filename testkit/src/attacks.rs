//! What the `handle`, `header` and `wire` fuzz targets do with their bytes, and the seed
//! inputs they start from. Each attack runs in a fresh, deterministic simulated world
//! (same names, tokens and nonces every time, so seeds stay meaningful), feeds the
//! bytes to one decoder of outside input, uses whatever it accepts, and then checks
//! that nothing else was harmed:
//!
//! - no panic anywhere (P4: bad input is an `Error`);
//! - the owner of the real segment still holds it and reads its data (P1);
//! - objects outside the namespace survive (P2): a `torch_*` name and another user's
//!   shmrc segment;
//! - once the owner releases and dies, a sweep leaves only those (P3), and a header
//!   that passed validation never stays stuck (P5);
//! - the owner's pooled memfd (slots, as a file_descriptor `ShmPool` makes them; the
//!   `wire` attack may hand the receiver a descriptor of it) keeps its data and the
//!   owner's slot, and the owner can still recycle it at the end (P1, and P3 for a
//!   memfd pool).
//!
//! This file is also compiled into `tests/fuzz_seeds.rs`, which runs every attack on
//! the committed seeds (`fuzz/seeds/<target>/`) in `cargo test` and checks the seeds
//! are still what [`seeds`] makes.

use shmrc::checkers::buf::ShmBufExt;
use shmrc::checkers::handle::{self, Decoded, ShareHandleExt};
use shmrc::checkers::os::Os;
use shmrc::checkers::os::sim::{SimKernel, SimOs};
use shmrc::checkers::sweep::{Action, sweep_with};
use shmrc::checkers::transport;
use shmrc::{CreateOptions, Error, Namespace, ShareHandle, ShmBuf, Strategy};

/// The user every process of the world runs as.
pub const UID: u32 = 1000;
/// Another user, whose segment must survive every attack.
pub const OTHER_UID: u32 = 1001;
/// What the owner wrote into its buffer.
pub const PAYLOAD: &[u8] = b"the owner's data, which no input may change";
/// Largest file the `header` attack writes (the sim machine is 64 MiB).
pub const MAX_FILE_LEN: usize = 1 << 20;
/// Most descriptors the `wire` attack attaches to its bytes.
pub const MAX_ATTACHED_FDS: usize = 3;

const DATA_LEN: usize = 64;
const CAPACITY: usize = 4;
const FOREIGN_NAME: &str = "torch_1234_5678";

/// The namespace under attack.
pub fn namespace() -> Namespace {
    Namespace::new("shmrc-fuzz").expect("a valid prefix")
}

/// A simulated machine with one live owner holding a file_system buffer of
/// [`namespace`], and two objects that are not ours.
pub struct World {
    /// The machine.
    pub kernel: SimKernel,
    /// The process that created and holds the buffer.
    pub owner: SimOs,
    /// The owner's buffer, holding [`PAYLOAD`].
    pub buf: ShmBuf<SimOs>,
    /// A handle the owner shared as bytes and nobody has attached yet: its slot holds
    /// an in-flight reference of the owner.
    pub in_flight_handle: Vec<u8>,
    /// The owner's memfd with holder slots (a file_descriptor pool's), holding
    /// [`PAYLOAD`]: the `wire` attack may pass a descriptor of it to the receiver.
    pub pooled: ShmBuf<SimOs>,
    foreign: Vec<String>,
    _other_users_buf: ShmBuf<SimOs>,
    _foreign_file: <SimOs as Os>::File,
}

impl World {
    /// The same world every time.
    pub fn new() -> World {
        let kernel = SimKernel::new(0x5eed);
        let owner = kernel.spawn(UID);
        let options = CreateOptions::new()
            .strategy(Strategy::FileSystem)
            .namespace(namespace())
            .capacity(CAPACITY);
        let buf = ShmBuf::create_with(&owner, DATA_LEN, &options).expect("create");
        buf.write_at(0, PAYLOAD).expect("write");
        let in_flight_handle = buf
            .share()
            .and_then(ShareHandle::into_bytes)
            .expect("share");
        let stranger = kernel.spawn(OTHER_UID);
        let other_users_buf = ShmBuf::create_with(&stranger, DATA_LEN, &options).expect("create");
        let foreign_file = stranger.shm_create(FOREIGN_NAME).expect("shm_create");
        let foreign = vec![
            FOREIGN_NAME.to_owned(),
            other_users_buf.name().expect("named").to_owned(),
        ];
        // Made last, so that everything above (and the seeds made of it) stays as it
        // was before the world had one.
        let pooled_options = CreateOptions::new()
            .strategy(Strategy::FileDescriptor)
            .capacity(CAPACITY);
        let pooled = ShmBuf::create_recyclable(&owner, DATA_LEN, &pooled_options).expect("create");
        pooled.write_at(0, PAYLOAD).expect("write");
        World {
            kernel,
            owner,
            buf,
            in_flight_handle,
            pooled,
            foreign,
            _other_users_buf: other_users_buf,
            _foreign_file: foreign_file,
        }
    }

    /// The owner's segment name.
    pub fn name(&self) -> String {
        self.buf.name().expect("a file_system buffer").to_owned()
    }

    /// A handle of the owner's segment without an in-flight reference.
    pub fn bare_handle(&self) -> Vec<u8> {
        bare_handle(&self.buf)
    }

    /// P1: the owner still holds its slot and reads its data, in its segment and its
    /// pooled memfd.
    pub fn assert_owner_unharmed(&self) {
        for buf in [&self.buf, &self.pooled] {
            let mut out = vec![0; PAYLOAD.len()];
            buf.read_at(0, &mut out).expect("the owner reads");
            assert_eq!(
                out,
                PAYLOAD,
                "the owner's data changed ({:?})",
                buf.strategy()
            );
            let census = buf.census().expect("slots");
            assert!(census.live >= 1, "the owner's slot was taken: {census:?}");
        }
        assert!(
            self.kernel.names().contains(&self.name()),
            "the owner's segment was unlinked under it"
        );
    }

    /// P2 and P3: the owner releases and dies, a fresh process sweeps, and only the
    /// objects that are not ours remain.
    pub fn tear_down_and_assert_clean(self) {
        let World {
            kernel,
            owner,
            buf,
            pooled,
            foreign,
            ..
        } = self;
        // P3 for a memfd pool: whatever was attached was released, so the owner
        // reuses its memfd (no slot left taken by what the input did).
        let census = pooled.census();
        assert_eq!(
            pooled.recycle().ok(),
            Some(true),
            "the owner cannot reuse its pooled memfd: {census:?}"
        );
        drop(pooled);
        buf.release().expect("the owner releases");
        kernel.kill(owner.pid());
        let sweeper = kernel.spawn(UID);
        sweep_with(&sweeper, &namespace(), false).expect("sweep");
        let mut expected = foreign;
        expected.sort();
        assert_eq!(
            kernel.names(),
            expected,
            "leaked, or a foreign name removed"
        );
    }
}

impl Default for World {
    fn default() -> World {
        World::new()
    }
}

/// A handle of `buf`'s segment without an in-flight reference, as any process of the
/// user could make from the name and the header it can read (the share key included,
/// so that mutations of it reach past the share-key check).
fn bare_handle(buf: &ShmBuf<SimOs>) -> Vec<u8> {
    let fields = buf.fields();
    handle::encode(&Decoded {
        meta: handle::HandleMeta {
            strategy: Strategy::FileSystem,
            key: fields.key(),
            data_len: fields.layout.data_len,
            capacity: fields.layout.capacity,
            generation: buf.generation(),
            share_key: fields.share_key,
        },
        name: buf.name().map(str::to_owned),
        in_flight: None,
    })
}

/// Errors that bad input may produce. Anything else (an OS error, `Killed`) means the
/// input reached somewhere it should not.
fn assert_refusal(what: &str, e: &Error) {
    let expected = matches!(
        e,
        Error::Gone { .. }
            | Error::HalfCreated { .. }
            | Error::Truncated { .. }
            | Error::BadMagic { .. }
            | Error::WrongVersion { .. }
            | Error::OtherUser { .. }
            | Error::OtherPidNamespace { .. }
            | Error::Corrupted { .. }
            | Error::HoldersFull { .. }
            // A handle whose generation is not the segment's: of another use.
            | Error::Stale { .. }
            | Error::OutsideNamespace { .. }
            | Error::BadNamespace { .. }
            | Error::Malformed { .. }
            | Error::WrongStrategy { .. }
            | Error::Disconnected
    );
    assert!(expected, "{what}: unexpected error {e:?}");
}

/// Uses a buffer an attack got: every byte of it reads and writes, then it is released.
fn use_and_release(buf: ShmBuf<SimOs>) {
    let mut all = vec![0; buf.len()];
    buf.read_at(0, &mut all)
        .expect("an attached buffer reads whole");
    buf.write_at(0, &all)
        .expect("an attached buffer writes whole");
    if let Err(e) = buf.release() {
        assert_refusal("release", &e);
    }
}

/// `handle`: `bytes` decoded as a share handle by another process of the user, and
/// attached if accepted. Returns how many buffers the input got attached (as every
/// attack does).
pub fn handle(bytes: &[u8]) -> usize {
    let world = World::new();
    if let Ok(decoded) = handle::decode(bytes, UID) {
        let again = handle::decode(&handle::encode(&decoded), UID).expect("re-decodes");
        assert_eq!(again, decoded, "encode/decode round trip");
    }
    let receiver = world.kernel.spawn(UID);
    let attached = match ShareHandle::from_bytes_with(&receiver, bytes).and_then(ShmBuf::attach) {
        Ok(buf) => {
            if buf.key() == world.buf.key() {
                let mut out = vec![0; PAYLOAD.len()];
                buf.read_at(0, &mut out).expect("read");
                assert_eq!(out, PAYLOAD, "attached the owner's segment, saw other data");
            }
            use_and_release(buf);
            1
        }
        Err(e) => {
            assert_refusal("attach", &e);
            0
        }
    };
    world.assert_owner_unharmed();
    world.tear_down_and_assert_clean();
    attached
}

/// `header`: the owner's segment file replaced by `bytes` (length and content) after
/// the owner died, then attached, swept, and swept again once everyone is dead.
pub fn header(bytes: &[u8]) -> usize {
    let bytes = &bytes[..bytes.len().min(MAX_FILE_LEN)];
    let World {
        kernel, owner, buf, ..
    } = World::new();
    let name = buf.name().expect("named").to_owned();
    let handle_bytes = bare_handle(&buf);
    kernel.kill(owner.pid());
    drop(buf); // the kernel reaps the owner: its mapping goes, the object is free to resize
    assert!(kernel.set_len(&name, bytes.len() as u64), "resize");
    assert!(kernel.poke(&name, 0, bytes), "overwrite");

    let attacher = kernel.spawn(UID);
    let attached =
        match ShareHandle::from_bytes_with(&attacher, &handle_bytes).and_then(ShmBuf::attach) {
            Ok(buf) => {
                use_and_release(buf);
                1
            }
            Err(e) => {
                assert_refusal("attach", &e);
                0
            }
        };
    sweep_with(&attacher, &namespace(), false).expect("a sweep with a holder alive");
    kernel.kill(attacher.pid());
    let sweeper = kernel.spawn(UID);
    let last = sweep_with(&sweeper, &namespace(), false).expect("sweep");
    // P5: a segment whose header validates is never stuck once its holders are dead.
    // Only the sweeper itself (a token the input may have guessed) can keep it.
    for report in last.segments.iter().filter(|r| r.name == name) {
        if let Action::Kept = report.action {
            let census = report.census.expect("a kept segment validated");
            assert!(
                census.live + census.in_flight > 0 || census.finalizing,
                "kept with no live holder: {census:?}"
            );
        }
        if let Action::Skipped(e) = &report.action {
            assert_refusal("sweep", e);
        }
    }
    attached
}

/// `wire`: `bytes[1..]` arrive on a Unix stream with `bytes[0] % 4` descriptors
/// attached: fresh memfds, except that with bit 2 of `bytes[0]` set the first is a
/// descriptor of the owner's pooled memfd (whose slots a forged handle might try to
/// take); the receiver reads messages until the stream ends or breaks and attaches
/// every handle it is given.
pub fn wire(bytes: &[u8]) -> usize {
    let Some((&fd_byte, stream_bytes)) = bytes.split_first() else {
        return 0;
    };
    let mut attached = 0;
    let world = World::new();
    let receiver = world.kernel.spawn(UID);
    let (to_receiver, at_receiver) = world.kernel.stream_pair(&world.owner, &receiver);
    if !stream_bytes.is_empty() {
        let files: Vec<_> = (0..usize::from(fd_byte) % (MAX_ATTACHED_FDS + 1))
            .map(|i| match (i, world.pooled.anonymous_file()) {
                (0, Some(file)) if fd_byte & 4 != 0 => world.owner.dup(file).expect("dup"),
                _ => world.owner.memfd_create("shmrc-fuzz").expect("memfd"),
            })
            .collect();
        let refs: Vec<_> = files.iter().collect();
        world
            .owner
            .send(&to_receiver, stream_bytes, &refs)
            .expect("send");
    }
    drop(to_receiver);
    loop {
        match transport::recv_with(&receiver, &at_receiver) {
            Ok(message) => {
                for handle in message.handles {
                    match ShmBuf::attach(handle) {
                        Ok(buf) => {
                            use_and_release(buf);
                            attached += 1;
                        }
                        Err(e) => assert_refusal("attach", &e),
                    }
                }
            }
            Err(e) => {
                assert_refusal("recv", &e);
                break;
            }
        }
    }
    drop(at_receiver);
    world.assert_owner_unharmed();
    world.tear_down_and_assert_clean();
    attached
}

/// The seed inputs: `(target, file name, bytes)`. Valid inputs of each decoder, so the
/// fuzzer starts from the accepting paths and mutates from there.
pub fn seeds() -> Vec<(&'static str, &'static str, Vec<u8>)> {
    let world = World::new();
    let in_flight = world.in_flight_handle.clone();
    let bare = world.bare_handle();
    let name = world.name();
    let file_len = world.buf.fields().layout.total_len();
    let segment = world.kernel.peek(&name, 0, file_len).expect("peek");

    let sender = world.kernel.spawn(UID);
    let listener = world.kernel.spawn(UID);
    let (tx, rx) = world.kernel.stream_pair(&sender, &listener);
    let forwarded = ShareHandle::from_bytes_with(&sender, &bare).expect("decode");
    transport::send_with(&sender, &tx, b"tensor 7", vec![forwarded]).expect("send");
    drop(tx);
    let read_all = |fd_byte: u8, rx| {
        let mut frames = vec![fd_byte];
        let mut chunk = [0u8; 4096];
        let mut files = Vec::new();
        loop {
            let n = listener.recv(rx, &mut chunk, &mut files).expect("recv");
            if n == 0 {
                break;
            }
            frames.extend_from_slice(&chunk[..n]);
        }
        frames
    };
    let frames = read_all(0, &rx);
    // The owner sends a handle of its pooled memfd (an in-flight reference in slot 1):
    // with `bytes[0] = 5`, the attack passes the memfd itself as the one descriptor.
    let (tx, rx) = world.kernel.stream_pair(&world.owner, &listener);
    let pooled = world.pooled.share().expect("share");
    transport::send_with(&world.owner, &tx, b"batch 3", vec![pooled]).expect("send");
    drop(tx);
    let pooled_frames = read_all(4 | 1, &rx);
    vec![
        ("handle", "in-flight", in_flight),
        ("handle", "bare", bare),
        ("header", "valid-segment", segment),
        ("wire", "one-file-system-handle", frames),
        ("wire", "one-pooled-memfd-handle", pooled_frames),
    ]
}
