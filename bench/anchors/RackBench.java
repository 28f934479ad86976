// Runs Apache Kafka's own RangeAssignor, StickyAssignor and CooperativeStickyAssignor on the
// rack-aware inputs of bench/racks.py, so groupkit's rack-local shares have an anchor computed
// by Kafka's code on the same inputs, in the same run.
//
// Run as a single source file (Java 11+), with Kafka's jars on the class path:
//
//   java -cp "$HOME/.cache/groupkit/kafka/4.1.1/lib/*" bench/anchors/RackBench.java < cases
//
// Input on stdin, one case after another, each line words separated by spaces:
//   A <assignor>                       range | sticky | cooperative-sticky
//   P <topic> <partition> <racks>      the partition's replica racks, comma-separated
//   M <member> <rack|-> <topics> <owned|-> <generation>
//                                      topics comma-separated; owned as topic:partition,...
//   E                                  end of the case: run it
// Output on stdout, per case: "R <member> <topic> <partition>" per assigned partition, then "E".
// Each distinct rack is one broker (node) of that rack; replicas point at those nodes, which is
// all the assignors read of the cluster (Node.rack).

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.HashSet;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.TreeMap;
import org.apache.kafka.clients.consumer.ConsumerGroupMetadata;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Assignment;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

public class RackBench {

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        String assignorName = null;
        Map<String, Node> nodes = new TreeMap<>();
        List<String[]> partitions = new ArrayList<>();
        Map<String, Subscription> members = new TreeMap<>();
        StringBuilder out = new StringBuilder();
        for (String line; (line = in.readLine()) != null; ) {
            String[] w = line.trim().split(" ");
            switch (w[0]) {
                case "A" -> assignorName = w[1];
                case "P" -> partitions.add(w);
                case "M" -> {
                    List<TopicPartition> owned = new ArrayList<>();
                    if (!w[4].equals("-"))
                        for (String tp : w[4].split(",")) {
                            int at = tp.lastIndexOf(':');
                            owned.add(new TopicPartition(tp.substring(0, at), Integer.parseInt(tp.substring(at + 1))));
                        }
                    Optional<String> rack = w[2].equals("-") ? Optional.empty() : Optional.of(w[2]);
                    List<String> topics = List.of(w[3].split(","));
                    int generation = Integer.parseInt(w[5]);
                    ByteBuffer userData = null;
                    if ("sticky".equals(assignorName) && !owned.isEmpty()) {
                        // The eager StickyAssignor reads what a member owns from its user data
                        // only, as the member's own StickyAssignor writes it after an assignment.
                        StickyAssignor own = new StickyAssignor();
                        own.onAssignment(new Assignment(owned),
                                new ConsumerGroupMetadata("bench", generation, w[1], Optional.empty()));
                        userData = own.subscriptionUserData(new HashSet<>(topics));
                    }
                    members.put(w[1], new Subscription(topics, userData, owned, generation, rack));
                }
                case "E" -> {
                    List<PartitionInfo> infos = new ArrayList<>();
                    for (String[] p : partitions) {
                        List<Node> replicas = new ArrayList<>();
                        if (p.length > 3 && !p[3].equals("-"))
                            for (String rack : p[3].split(","))
                                replicas.add(nodes.computeIfAbsent(rack, r -> new Node(nodes.size(), "h", 9092, r)));
                        Node[] r = replicas.toArray(new Node[0]);
                        infos.add(new PartitionInfo(p[1], Integer.parseInt(p[2]), r.length > 0 ? r[0] : null, r, r));
                    }
                    Cluster cluster = new Cluster("bench", new ArrayList<>(nodes.values()), infos,
                            Collections.emptySet(), Collections.emptySet());
                    ConsumerPartitionAssignor assignor = switch (assignorName) {
                        case "range" -> new RangeAssignor();
                        case "sticky" -> new StickyAssignor();
                        case "cooperative-sticky" -> new CooperativeStickyAssignor();
                        default -> throw new IllegalArgumentException(assignorName);
                    };
                    var result = assignor.assign(cluster, new GroupSubscription(new HashMap<>(members)));
                    for (var e : new TreeMap<>(result.groupAssignment()).entrySet())
                        for (TopicPartition tp : e.getValue().partitions())
                            out.append("R ").append(e.getKey()).append(' ').append(tp.topic())
                               .append(' ').append(tp.partition()).append('\n');
                    out.append("E\n");
                    nodes.clear();
                    partitions.clear();
                    members.clear();
                }
                default -> { }
            }
        }
        System.out.print(out);
    }
}
