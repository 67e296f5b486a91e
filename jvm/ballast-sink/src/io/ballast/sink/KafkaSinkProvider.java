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
 * What Ballast's two Kafka writers share: a batch-write-only data source that takes the rows' own
 * schema (each writer checks the columns it reads) and hands every task a writer of the subclass's
 * factory. Spark commits nothing of its own at the job's end: a task's commit is the write.
 */
public abstract class KafkaSinkProvider implements TableProvider {

  /** The table's name in Spark's plans and errors. */
  protected abstract String name();

  /** The tasks' writers for one write, from its options and the rows' schema (checked here, on the driver). */
  protected abstract DataWriterFactory factory(Map<String, String> options, StructType schema);

  @Override
  public StructType inferSchema(CaseInsensitiveStringMap options) {
    return new StructType();
  }

  @Override
  public boolean supportsExternalMetadata() {
    return true;
  }

  @Override
  public Table getTable(StructType schema, Transform[] partitioning, Map<String, String> properties) {
    return new SinkTable(schema);
  }

  private final class SinkTable implements Table, SupportsWrite {
    private final StructType schema;

    SinkTable(StructType schema) {
      this.schema = schema;
    }

    @Override
    public String name() {
      return KafkaSinkProvider.this.name();
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
      DataWriterFactory f = factory(new HashMap<>(info.options().asCaseSensitiveMap()), info.schema());
      return new WriteBuilder() {
        @Override
        public Write build() {
          return new Write() {
            @Override
            public BatchWrite toBatch() {
              return new BatchWrite() {
                @Override
                public DataWriterFactory createBatchWriterFactory(PhysicalWriteInfo physical) {
                  return f;
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
