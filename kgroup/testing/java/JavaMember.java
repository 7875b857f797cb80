/*
 * JavaMember: a Kafka group member driven by the Java reference client, for interop tests.
 *
 * Runs a KafkaConsumer in a poll loop and reports group events as one JSON object per line
 * on stdout (logs go to stderr):
 *
 *   {"event":"started"}
 *   {"event":"assigned","partitions":[["t",0],...],"assignment":[...],"generation":1,"member_id":"..."}
 *   {"event":"revoked", ...}   {"event":"lost", ...}
 *   {"event":"committed","offsets":[["t",0,12],...]}
 *   {"event":"status","generation":3,"member_id":"...","assignment":[...]}
 *   {"event":"error","message":"..."}
 *   {"event":"closed"}
 *
 * Every line also has "t": System.nanoTime() in seconds, which on Linux is CLOCK_MONOTONIC,
 * the clock of Python's time.monotonic(), so the lines of Java and Python processes share one
 * timeline. "assigned" and "lost" are stamped when the callback starts, "revoked" when it
 * ends (the member holds the partitions until then), "closed" after close() returned.
 * "partitions" holds the partitions of that callback; "assignment" is what
 * consumer.assignment() returned inside it (in onPartitionsRevoked that still includes the
 * partitions being revoked). "status" follows a poll() after which the generation, member
 * id or assignment (consumer.groupMetadata(), consumer.assignment()) changed. Commands, one per line on stdin: "close" (graceful close: the member
 * leaves the group, then the program exits 0) and "commit" (commitSync of the current
 * positions). End of stdin and SIGTERM also close gracefully.
 *
 * Options: --bootstrap HOST:PORT --group ID --topic NAME[,NAME...]
 *   [--protocol classic|consumer] [--assignor range|roundrobin|sticky|cooperative-sticky]
 *   [--session-timeout-ms N] [--heartbeat-interval-ms N] [--max-poll-interval-ms N]
 *   [--group-instance-id ID] [--client-id ID] [--poll-ms N] [--close-timeout-ms N]
 *   [--property KEY=VALUE ...]
 *
 * Run it with the kafka-clients jars on the class path, either compiled or in Java's
 * single-file source mode:  java -cp 'libs/*' JavaMember.java --bootstrap ...
 */

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collection;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.consumer.CloseOptions;
import org.apache.kafka.clients.consumer.ConsumerConfig;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerRebalanceListener;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.errors.WakeupException;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;

public final class JavaMember {
    private static final Object OUT_LOCK = new Object();
    private static final ConcurrentLinkedQueue<String> COMMANDS = new ConcurrentLinkedQueue<>();
    private static final CountDownLatch DONE = new CountDownLatch(1);
    private static volatile boolean stopping = false;
    private static volatile int exitCode = 0;
    private static volatile KafkaConsumer<byte[], byte[]> consumer;

    private JavaMember() {}

    public static void main(String[] argv) throws Exception {
        Map<String, String> opts = new HashMap<>();
        List<String> extra = new ArrayList<>();
        for (int i = 0; i < argv.length; i++) {
            String key = argv[i];
            if (!key.startsWith("--") || i + 1 >= argv.length) {
                fail("bad argument: " + key);
            }
            String value = argv[++i];
            if (key.equals("--property")) {
                extra.add(value);
            } else {
                opts.put(key.substring(2), value);
            }
        }
        for (String required : new String[] {"bootstrap", "group", "topic"}) {
            if (!opts.containsKey(required)) {
                fail("missing --" + required);
            }
        }
        String protocol = opts.getOrDefault("protocol", "classic");

        Properties props = new Properties();
        props.put(ConsumerConfig.BOOTSTRAP_SERVERS_CONFIG, opts.get("bootstrap"));
        props.put(ConsumerConfig.GROUP_ID_CONFIG, opts.get("group"));
        props.put(ConsumerConfig.GROUP_PROTOCOL_CONFIG, protocol);
        props.put(ConsumerConfig.KEY_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.VALUE_DESERIALIZER_CLASS_CONFIG, ByteArrayDeserializer.class.getName());
        props.put(ConsumerConfig.ENABLE_AUTO_COMMIT_CONFIG, "false");
        props.put(ConsumerConfig.AUTO_OFFSET_RESET_CONFIG, "earliest");
        props.put(ConsumerConfig.CLIENT_ID_CONFIG, opts.getOrDefault("client-id", "java-member"));
        if (protocol.equals("classic")) {
            props.put(ConsumerConfig.PARTITION_ASSIGNMENT_STRATEGY_CONFIG,
                    assignorClass(opts.getOrDefault("assignor", "range")));
            props.put(ConsumerConfig.SESSION_TIMEOUT_MS_CONFIG,
                    opts.getOrDefault("session-timeout-ms", "10000"));
            props.put(ConsumerConfig.HEARTBEAT_INTERVAL_MS_CONFIG,
                    opts.getOrDefault("heartbeat-interval-ms", "1000"));
        }
        props.put(ConsumerConfig.MAX_POLL_INTERVAL_MS_CONFIG,
                opts.getOrDefault("max-poll-interval-ms", "300000"));
        if (opts.containsKey("group-instance-id")) {
            props.put(ConsumerConfig.GROUP_INSTANCE_ID_CONFIG, opts.get("group-instance-id"));
        }
        for (String kv : extra) {
            int eq = kv.indexOf('=');
            if (eq <= 0) {
                fail("bad --property " + kv);
            }
            props.put(kv.substring(0, eq), kv.substring(eq + 1));
        }
        long pollMs = Long.parseLong(opts.getOrDefault("poll-ms", "100"));
        Duration closeTimeout = Duration.ofMillis(
                Long.parseLong(opts.getOrDefault("close-timeout-ms", "30000")));
        List<String> topics = Arrays.asList(opts.get("topic").split(","));

        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            // SIGTERM: let the poll loop close the consumer (leaving the group), then exit
            // with the loop's status rather than the signal's.
            requestStop();
            try {
                if (DONE.await(30, TimeUnit.SECONDS)) {
                    Runtime.getRuntime().halt(exitCode);
                }
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
            }
        }, "java-member-shutdown"));
        Thread stdin = new Thread(JavaMember::readCommands, "java-member-stdin");
        stdin.setDaemon(true);

        KafkaConsumer<byte[], byte[]> c = null;
        try {
            c = new KafkaConsumer<>(props);
            consumer = c;
            c.subscribe(topics, new Listener(c));
            emit("{\"event\":\"started\"}");
            stdin.start();
            String lastStatus = "";
            while (!stopping) {
                try {
                    c.poll(Duration.ofMillis(pollMs));
                } catch (WakeupException e) {
                    // a command or a stop request: handled below
                }
                String status = status(c);
                if (!status.equals(lastStatus)) {
                    lastStatus = status;
                    emit(status);
                }
                String cmd;
                while ((cmd = COMMANDS.poll()) != null) {
                    if (cmd.equals("commit")) {
                        commit(c);
                    }
                }
            }
        } catch (Exception e) {
            emit("{\"event\":\"error\",\"message\":" + str(String.valueOf(e)) + "}");
            exitCode = 1;
        } finally {
            consumer = null;
            if (c != null) {
                try {
                    // LeaveGroup (dynamic members) and the revoke callbacks, bounded.
                    c.close(CloseOptions.timeout(closeTimeout));
                } catch (Exception e) {
                    emit("{\"event\":\"error\",\"message\":" + str("close failed: " + e) + "}");
                    exitCode = 1;
                }
            }
            emit("{\"event\":\"closed\"}");
            DONE.countDown();
        }
        System.exit(exitCode);
    }

    private static void readCommands() {
        try (BufferedReader in = new BufferedReader(
                new InputStreamReader(System.in, StandardCharsets.UTF_8))) {
            String line;
            while ((line = in.readLine()) != null) {
                String cmd = line.trim();
                if (cmd.equals("close")) {
                    requestStop();
                    return;
                } else if (!cmd.isEmpty()) {
                    COMMANDS.add(cmd);
                    KafkaConsumer<byte[], byte[]> c = consumer;
                    if (c != null) {
                        c.wakeup();
                    }
                }
            }
        } catch (Exception e) {
            // fall through: end of input closes
        }
        requestStop();
    }

    private static void requestStop() {
        stopping = true;
        KafkaConsumer<byte[], byte[]> c = consumer;
        if (c != null) {
            c.wakeup();
        }
    }

    private static String status(KafkaConsumer<byte[], byte[]> c) {
        StringBuilder sb = new StringBuilder("{\"event\":\"status\"");
        try {
            ConsumerGroupMetadata md = c.groupMetadata();
            sb.append(",\"generation\":").append(md.generationId());
            sb.append(",\"member_id\":").append(str(md.memberId()));
        } catch (Exception e) {
            // no group metadata yet
        }
        sb.append(",\"assignment\":").append(tps(c.assignment()));
        return sb.append('}').toString();
    }

    private static void commit(KafkaConsumer<byte[], byte[]> c) {
        Map<TopicPartition, OffsetAndMetadata> offsets = new HashMap<>();
        for (TopicPartition tp : c.assignment()) {
            offsets.put(tp, new OffsetAndMetadata(c.position(tp)));
        }
        try {
            c.commitSync(offsets);
            StringBuilder sb = new StringBuilder("{\"event\":\"committed\",\"offsets\":[");
            boolean first = true;
            for (Map.Entry<TopicPartition, OffsetAndMetadata> e : offsets.entrySet()) {
                sb.append(first ? "" : ",").append('[').append(str(e.getKey().topic()))
                        .append(',').append(e.getKey().partition()).append(',')
                        .append(e.getValue().offset()).append(']');
                first = false;
            }
            emit(sb.append("]}").toString());
        } catch (Exception e) {
            emit("{\"event\":\"error\",\"message\":" + str("commit failed: " + e) + "}");
        }
    }

    private static String assignorClass(String name) {
        switch (name) {
            case "range":
                return "org.apache.kafka.clients.consumer.RangeAssignor";
            case "roundrobin":
                return "org.apache.kafka.clients.consumer.RoundRobinAssignor";
            case "sticky":
                return "org.apache.kafka.clients.consumer.StickyAssignor";
            case "cooperative-sticky":
                return "org.apache.kafka.clients.consumer.CooperativeStickyAssignor";
            default:
                return name;
        }
    }

    private static final class Listener implements ConsumerRebalanceListener {
        private final KafkaConsumer<byte[], byte[]> c;

        Listener(KafkaConsumer<byte[], byte[]> c) {
            this.c = c;
        }

        @Override
        public void onPartitionsAssigned(Collection<TopicPartition> partitions) {
            report("assigned", partitions);
        }

        @Override
        public void onPartitionsRevoked(Collection<TopicPartition> partitions) {
            report("revoked", partitions);
        }

        @Override
        public void onPartitionsLost(Collection<TopicPartition> partitions) {
            report("lost", partitions);
        }

        private void report(String event, Collection<TopicPartition> partitions) {
            long start = System.nanoTime();
            StringBuilder sb = new StringBuilder("{\"event\":\"").append(event).append("\"");
            sb.append(",\"partitions\":").append(tps(partitions));
            sb.append(",\"assignment\":").append(tps(c.assignment()));
            try {
                ConsumerGroupMetadata md = c.groupMetadata();
                sb.append(",\"generation\":").append(md.generationId());
                sb.append(",\"member_id\":").append(str(md.memberId()));
            } catch (Exception e) {
                // metadata is unavailable while closing: leave it out
            }
            // a hold starts when onPartitionsAssigned starts, ends when onPartitionsLost
            // starts or onPartitionsRevoked returns (this line is its last statement)
            emit(sb.append('}').toString(), event.equals("revoked") ? System.nanoTime() : start);
        }
    }

    private static String tps(Collection<TopicPartition> partitions) {
        List<TopicPartition> list = new ArrayList<>(partitions);
        list.sort((a, b) -> a.topic().equals(b.topic())
                ? Integer.compare(a.partition(), b.partition())
                : a.topic().compareTo(b.topic()));
        StringBuilder sb = new StringBuilder("[");
        boolean first = true;
        for (TopicPartition tp : list) {
            sb.append(first ? "" : ",").append('[').append(str(tp.topic())).append(',')
                    .append(tp.partition()).append(']');
            first = false;
        }
        return sb.append(']').toString();
    }

    private static String str(String s) {
        StringBuilder sb = new StringBuilder("\"");
        for (int i = 0; i < s.length(); i++) {
            char ch = s.charAt(i);
            switch (ch) {
                case '"':
                    sb.append("\\\"");
                    break;
                case '\\':
                    sb.append("\\\\");
                    break;
                case '\n':
                    sb.append("\\n");
                    break;
                case '\r':
                    sb.append("\\r");
                    break;
                case '\t':
                    sb.append("\\t");
                    break;
                default:
                    if (ch < 0x20) {
                        sb.append(String.format("\\u%04x", (int) ch));
                    } else {
                        sb.append(ch);
                    }
            }
        }
        return sb.append('"').toString();
    }

    private static void emit(String json) {
        emit(json, System.nanoTime());
    }

    private static void emit(String json, long nanos) {
        // "t" first: {"t":12.345678901,"event":...}
        String line = "{\"t\":" + (nanos / 1_000_000_000L) + "."
                + String.format("%09d", nanos % 1_000_000_000L) + "," + json.substring(1);
        synchronized (OUT_LOCK) {
            System.out.println(line);
            System.out.flush();
        }
    }

    private static void fail(String message) {
        System.err.println("JavaMember: " + message);
        System.exit(2);
    }
}
