/*
 * Kafka's own partition assignors as a line-oriented oracle for kgroup's differential tests.
 *
 * stdin: one JSON case per line
 *   {"assignor": "range" | "roundrobin" | "sticky" | "cooperative-sticky"
 *                | "cooperative-sticky-target",
 *    "topics": {"t0": 6, ...},
 *    "racks": {"t0": [["r1", "r2"], [], ...], ...}   (optional: per partition, the racks of
 *             its replicas; a partition without racks has its replica on a node without one),
 *    "members": [{"member_id": "...", "group_instance_id": null | "...",
 *                 "topics": ["t0", ...], "owned": [["t0", 1], ...], "generation": -1,
 *                 "user_data": null | "<base64>", "rack": null | "..."}]}
 * stdout: one JSON line per case, in order
 *   {"assignment": {"<member_id>": [["t0", 0], ...], ...}}   or   {"error": "..."}
 *
 * A line {"version": true} answers {"version": "<kafka-clients version>"}.
 *
 * Each case builds a Cluster with the given partition counts (without "racks": one node, no
 * rack; with it: one node per rack, with that rack, and one without, each partition's
 * replicas on the nodes of its racks) and a
 * GroupSubscription of ConsumerPartitionAssignor.Subscription(topics, userData, owned,
 * generation, rack) with the group instance id set, and calls the real
 * org.apache.kafka.clients.consumer assignor's assign(cluster, groupSubscription) on a fresh
 * instance. "cooperative-sticky-target" is CooperativeStickyAssignor's target before it
 * withholds the partitions that change owner: the AbstractStickyAssignor algorithm with
 * CooperativeStickyAssignor's member data. Subscriptions go into a HashMap, as the Java leader's do, so the input order of
 * the members does not matter. The protocol stream is the original stdout; System.out is
 * pointed at stderr so nothing else can write to it.
 */

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.BufferedReader;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Collections;
import java.util.HashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupAssignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.utils.internals.AppInfoParser;

public final class AssignorOracle {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final Node NODE = new Node(0, "localhost", 9092);

    public static void main(String[] args) throws Exception {
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode result;
            try {
                result = answer(MAPPER.readTree(line));
            } catch (Throwable e) {
                result = MAPPER.createObjectNode();
                result.put("error", e.toString());
            }
            out.println(MAPPER.writeValueAsString(result));
            out.flush();
        }
    }

    private static ObjectNode answer(JsonNode request) {
        ObjectNode result = MAPPER.createObjectNode();
        if (request.has("version")) {
            result.put("version", AppInfoParser.getVersion());
            return result;
        }
        ConsumerPartitionAssignor assignor = assignor(request.get("assignor").asText());
        GroupAssignment assignment = assignor.assign(
                cluster(request.get("topics"), request.get("racks")), subscriptions(request.get("members")));
        ObjectNode members = result.putObject("assignment");
        for (Map.Entry<String, Assignment> entry : assignment.groupAssignment().entrySet()) {
            ArrayNode partitions = members.putArray(entry.getKey());
            for (TopicPartition tp : entry.getValue().partitions()) {
                partitions.addArray().add(tp.topic()).add(tp.partition());
            }
        }
        return result;
    }

    private static ConsumerPartitionAssignor assignor(String name) {
        switch (name) {
            case "range":
                return new RangeAssignor();
            case "roundrobin":
                return new RoundRobinAssignor();
            case "sticky":
                return new StickyAssignor();
            case "cooperative-sticky":
                return new CooperativeStickyAssignor();
            case "cooperative-sticky-target":
                return new CooperativeTarget();
            default:
                throw new IllegalArgumentException("unknown assignor " + name);
        }
    }

    private static Cluster cluster(JsonNode topics, JsonNode racks) {
        Map<String, Node> nodesByRack = new HashMap<>();
        List<Node> nodes = new ArrayList<>(List.of(NODE));
        List<PartitionInfo> partitions = new ArrayList<>();
        for (Map.Entry<String, JsonNode> topic : topics.properties()) {
            int count = topic.getValue().asInt();
            JsonNode topicRacks = isPresent(racks) ? racks.get(topic.getKey()) : null;
            for (int p = 0; p < count; p++) {
                List<Node> replicas = new ArrayList<>();
                if (isPresent(topicRacks)) {
                    for (JsonNode rack : topicRacks.get(p)) {
                        replicas.add(nodesByRack.computeIfAbsent(rack.asText(), r -> {
                            Node node = new Node(nodes.size(), "localhost", 9092 + nodes.size(), r);
                            nodes.add(node);
                            return node;
                        }));
                    }
                }
                if (replicas.isEmpty()) {
                    replicas.add(NODE);
                }
                Node[] array = replicas.toArray(new Node[0]);
                partitions.add(new PartitionInfo(topic.getKey(), p, array[0], array, array));
            }
        }
        return new Cluster("oracle", nodes, partitions, Collections.emptySet(), Collections.emptySet());
    }

    private static GroupSubscription subscriptions(JsonNode members) {
        Map<String, Subscription> subscriptions = new HashMap<>();
        for (JsonNode member : members) {
            List<String> topics = new ArrayList<>();
            for (JsonNode topic : member.get("topics")) {
                topics.add(topic.asText());
            }
            List<TopicPartition> owned = new ArrayList<>();
            JsonNode ownedNode = member.get("owned");
            if (ownedNode != null) {
                for (JsonNode tp : ownedNode) {
                    owned.add(new TopicPartition(tp.get(0).asText(), tp.get(1).asInt()));
                }
            }
            ByteBuffer userData = null;
            if (isPresent(member.get("user_data"))) {
                userData = ByteBuffer.wrap(Base64.getDecoder().decode(member.get("user_data").asText()));
            }
            int generation = member.has("generation") ? member.get("generation").asInt() : -1;
            Optional<String> rack = isPresent(member.get("rack")) ? Optional.of(member.get("rack").asText()) : Optional.empty();
            Subscription subscription = new Subscription(topics, userData, owned, generation, rack);
            JsonNode instance = member.get("group_instance_id");
            subscription.setGroupInstanceId(isPresent(instance) ? Optional.of(instance.asText()) : Optional.empty());
            String memberId = member.get("member_id").asText();
            if (subscriptions.put(memberId, subscription) != null) {
                throw new IllegalArgumentException("member id " + memberId + " appears twice");
            }
        }
        return new GroupSubscription(subscriptions);
    }

    /**
     * CooperativeStickyAssignor.assignPartitions is AbstractStickyAssignor.assignPartitions
     * (the target) followed by the removal of every partition that changes owner. This runs
     * the first half only: the same algorithm, with CooperativeStickyAssignor's own reading
     * of each member's owned partitions and generation.
     */
    private static final class CooperativeTarget extends AbstractStickyAssignor {
        private static final Method MEMBER_DATA;

        static {
            try {
                MEMBER_DATA = CooperativeStickyAssignor.class.getDeclaredMethod("memberData", Subscription.class);
                MEMBER_DATA.setAccessible(true);
            } catch (NoSuchMethodException e) {
                throw new ExceptionInInitializerError(e);
            }
        }

        private final CooperativeStickyAssignor delegate = new CooperativeStickyAssignor();

        @Override
        protected MemberData memberData(Subscription subscription) {
            try {
                return (MemberData) MEMBER_DATA.invoke(delegate, subscription);
            } catch (IllegalAccessException | InvocationTargetException e) {
                throw new IllegalStateException(e);
            }
        }

        @Override
        public String name() {
            return "cooperative-sticky";
        }
    }

    private static boolean isPresent(JsonNode node) {
        return node != null && !node.isNull();
    }
}
