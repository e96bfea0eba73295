/*
 * NereusAdapter.java - an example adapter in Java 17 using only the JDK:
 * how a Kafka or Pulsar broker (both JVM programs) keeps a partition in a
 * nereusfs stream.  Compile and run:
 *
 *   javac -d classes NereusAdapter.java
 *   java -cp classes NereusAdapter /mnt/nereus/kafka/orders/p0
 *
 * The POSIX mapping it relies on (README, "Adapters"):
 *  - an append is one FileChannel.write() on a channel opened with APPEND:
 *    all of it or nothing, at the head, durable when it returns;
 *  - a conditional append is a positional write, write(buf, offset), on a
 *    channel opened without APPEND: it lands at offset or fails ESPIPE
 *    ("Illegal seek");
 *  - reads are positional, read(buf, offset), in [start, head);
 *  - head, version, start and epoch are user.nereus.* extended attributes,
 *    read and written through UserDefinedFileAttributeView (which leaves
 *    out the "user." prefix); the adapter keeps its own state (here a
 *    checkpoint) in another user.* attribute;
 *  - leadership: the new leader writes a higher user.nereus.epoch, then
 *    opens its channels, which take that epoch; every channel opened
 *    before fails its next write with ESTALE ("Stale file handle").
 * The JDK cannot issue ioctls, so a Java adapter learns its offsets from
 * the head attribute after taking the epoch (no one else can append then)
 * and uses positional writes for the expected offsets.
 *
 * main() plays two leaders on one stream and checks each rule; it prints
 * "NereusAdapter: OK" and exits 0, or names the broken rule and exits 1.
 */
import java.io.IOException;
import java.nio.ByteBuffer;
import java.nio.channels.FileChannel;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.StandardOpenOption;
import java.nio.file.attribute.UserDefinedFileAttributeView;

public final class NereusAdapter implements AutoCloseable {
    private final Path stream;
    private final UserDefinedFileAttributeView attrs;
    private final long epoch;
    private final FileChannel appender;     // O_APPEND: plain appends
    private final FileChannel conditional;  // positional writes: expected offsets
    private final FileChannel reader;
    private long next;                      // where our next append lands

    /** Take the partition: fence every older writer with epoch, then open. */
    public NereusAdapter(Path stream, long epoch) throws IOException {
        this.stream = stream;
        this.attrs = Files.getFileAttributeView(stream, UserDefinedFileAttributeView.class);
        this.epoch = epoch;
        setAttr("nereus.epoch", Long.toString(epoch));  // EINVAL if lower: not ours
        this.appender = FileChannel.open(stream, StandardOpenOption.WRITE, StandardOpenOption.APPEND);
        this.conditional = FileChannel.open(stream, StandardOpenOption.WRITE);
        this.reader = FileChannel.open(stream, StandardOpenOption.READ);
        this.next = longAttr("nereus.head");  // fenced: nobody else appends now
    }

    public String getAttr(String name) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(attrs.size(name));
        attrs.read(name, buf);
        return new String(buf.array(), 0, buf.position(), StandardCharsets.US_ASCII);
    }

    public long longAttr(String name) throws IOException {
        return Long.parseLong(getAttr(name));
    }

    public void setAttr(String name, String value) throws IOException {
        attrs.write(name, ByteBuffer.wrap(value.getBytes(StandardCharsets.US_ASCII)));
    }

    /** One atomic append at the head; returns the bytes written. */
    public int append(byte[] batch) throws IOException {
        int n = appender.write(ByteBuffer.wrap(batch));
        next += n;
        return n;
    }

    /** A conditional append at exactly the offset we expect; ESPIPE otherwise. */
    public long appendExpected(byte[] batch) throws IOException {
        return appendAt(next, batch);
    }

    public long appendAt(long offset, byte[] batch) throws IOException {
        int n = conditional.write(ByteBuffer.wrap(batch), offset);
        next = offset + n;
        return offset;
    }

    public byte[] readAt(long offset, int len) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(len);
        while (buf.hasRemaining() && reader.read(buf, offset + buf.position()) > 0) {
        }
        byte[] out = new byte[buf.position()];
        buf.flip();
        buf.get(out);
        return out;
    }

    public long next() {
        return next;
    }

    @Override
    public void close() throws IOException {
        appender.close();
        conditional.close();
        reader.close();
    }

    // ---- the demonstration --------------------------------------------

    private static void check(boolean ok, String rule) {
        if (!ok) {
            System.err.println("NereusAdapter: FAILED: " + rule);
            System.exit(1);
        }
    }

    private static byte[] batch(String who, int seq) {
        return String.format("%s batch %04d%n", who, seq).getBytes(StandardCharsets.US_ASCII);
    }

    /** The errno text of a failed write (the JDK gives no errno). */
    private static String failure(IOException e) {
        return e.getMessage() == null ? e.toString() : e.getMessage();
    }

    public static void main(String[] args) throws IOException {
        if (args.length != 1) {
            System.err.println("usage: java NereusAdapter STREAM");
            System.exit(2);
        }
        Path path = Path.of(args[0]);
        if (!Files.exists(path))
            Files.createFile(path);
        UserDefinedFileAttributeView view =
            Files.getFileAttributeView(path, UserDefinedFileAttributeView.class);
        check(view.list().contains("nereus.head"), "user.nereus.head is listed");

        long base;
        try (NereusAdapter a = new NereusAdapter(path, 1 + Long.parseLong(
                 new String(readAll(view, "nereus.epoch"), StandardCharsets.US_ASCII)))) {
            base = a.next();
            long size = 0;
            for (int i = 0; i < 3; i++)
                size += a.append(batch("A", i));
            check(a.longAttr("nereus.head") == base + size, "head == bytes appended");
            check(Files.size(path) == base + size, "st_size == head");
            long at = a.appendExpected(batch("A", 3));
            check(at == base + size, "a conditional append lands where expected");
            try {
                a.appendAt(base, batch("A", 99));
                check(false, "a positional write below the head fails ESPIPE");
            } catch (IOException e) {
                check(failure(e).contains("Illegal seek"), "ESPIPE, got " + failure(e));
            }
            check(new String(a.readAt(base, batch("A", 0).length), StandardCharsets.US_ASCII)
                  .equals("A batch 0000\n"), "a positional read returns the first batch");
            a.setAttr("adapter.checkpoint", Long.toString(a.next()));
            check(a.getAttr("adapter.checkpoint").equals(Long.toString(a.next())),
                  "the adapter's own attribute reads back");

            // A new leader takes over: the old one must be fenced.
            try (NereusAdapter b = new NereusAdapter(path, a.epoch + 1)) {
                check(b.next() == a.next(), "the new leader starts at the old one's end");
                try {
                    a.append(batch("A", 4));
                    check(false, "the deposed leader's append fails ESTALE");
                } catch (IOException e) {
                    check(failure(e).contains("Stale file handle"), "ESTALE, got " + failure(e));
                }
                try {
                    a.appendExpected(batch("A", 4));
                    check(false, "the deposed leader's conditional append fails ESTALE");
                } catch (IOException e) {
                    check(failure(e).contains("Stale file handle"), "ESTALE, got " + failure(e));
                }
                b.appendExpected(batch("B", 0));
                check(b.longAttr("nereus.epoch") == a.epoch + 1, "the epoch is the new leader's");
                check(Files.size(path) == b.next(), "nothing of A after the fence");
            }
        }
        System.out.println("NereusAdapter: OK (stream " + path + ", from offset " + base + ")");
    }

    private static byte[] readAll(UserDefinedFileAttributeView view, String name) throws IOException {
        ByteBuffer buf = ByteBuffer.allocate(view.size(name));
        view.read(name, buf);
        return java.util.Arrays.copyOf(buf.array(), buf.position());
    }
}
