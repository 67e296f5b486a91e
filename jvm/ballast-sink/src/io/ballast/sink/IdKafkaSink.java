package io.ballast.sink;

import java.util.EnumSet;
import java.util.HashMap;
import java.util.Map;
import java.util.Set;
import org.apache.spark.sql.connector.catalog.SupportsWrite;
import org.apache.spark.sql.connector.catalog.Table;
import org.apache.spark.sql.connector.catalog.TableCapability;
import org.apache.spark.sql.connector.catalog.TableProvider;
import org.apache.spark.sql.connector.expressions.Transform;
import org.apache.spark.sql.connector.write.BatchWrite;
import org.apache.spark.sql.connector.write.DataWriterFactory;
import org.apache.spark.sql.connector.write.LogicalWriteInfo;
import org.apache.spark.sql.connector.write.PhysicalWriteInfo;
import org.apache.spark.sql.connector.write.Write;
import org.apache.spark.sql.connector.write.WriteBuilder;
import org.apache.spark.sql.connector.write.WriterCommitMessage;
import org.apache.spark.sql.types.StructType;
import org.apache.spark.sql.util.CaseInsensitiveStringMap;

/**
 * Ballast's Kafka writer for a stateless query's epoch (spark_jobs/id_sink.py): the records Spark's
 * own Kafka sink would write, with their headers made here from the row's id columns instead of
 * an array of header structs the query projects per row. Why: Spark's sink with one header per
 * record cost 1.57-1.82x its write without one (the header array's projection, its strings, Scala
 * collections per row); made here from the id's numbers, 1.23-1.27x (bench/sink_headers.py).
 *
 * Rows: value (binary), __p (int), __o (bigint), optional topic (string; else the `topic`
 * option), key (binary), __reason / __detail / __source (string: a dead letter's). Options:
 * `epoch`, `topic`, and Kafka's producer settings as `kafka.*`, as Spark's sink takes them.
 */
public final class IdKafkaSink implements TableProvider {

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return new StructType();
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true; // the rows' own schema, whatever it is: the writer checks the columns it needs
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SinkTable(schema);
  }

  static final class SinkTable implements Table, SupportsWrite {
    private final StructType schema;

    SinkTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return "ballast-id-kafka";
    }

    @Override
    @SuppressWarnings("deprecation") // Spark 4 still asks a table for it (columns() derives from it)
    public StructType schema() {
      return schema;
    }

    @Override
    public Set<TableCapability> capabilities() {
      return EnumSet.of(TableCapability.BATCH_WRITE);
    }

    @Override
    public WriteBuilder newWriteBuilder(LogicalWriteInfo info) {
      Map<String, String> options = new HashMap<>(info.options().asCaseSensitiveMap());
      Columns columns = Columns.of(info.schema(), options.containsKey("topic"));
      return new WriteBuilder() {
        @Override
        public Write build() {
          return new Write() {
            @Override
            public BatchWrite toBatch() {
              return new BatchWrite() {
                @Override
                public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
                  return new RecordWriter.Factory(options, columns);
                }

                @Override
                public void commit(WriterCommitMessage[] messages) {}

                @Override
                public void abort(WriterCommitMessage[] messages) {}
              };
            }
          };
        }
      };
    }
  }
}
