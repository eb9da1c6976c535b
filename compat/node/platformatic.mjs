// @platformatic/kafka (pure JavaScript, its own protocol code) driven by
// tests/test_compat_node.py. See common.mjs for the command line; every command prints what
// the client answered.
import {
  Admin,
  Consumer,
  ProduceAcks,
  Producer,
  stringDeserializers,
  stringSerializers
} from '@platformatic/kafka'
import { emit, main, needed, offsetsByTime, produceRecords, produceStream, sleep } from './common.mjs'

function settings (options) {
  return {
    clientId: 'tidelog-compat-platformatic',
    bootstrapBrokers: options.brokers,
    connectTimeout: 3000,
    timeout: 30000,
    retries: 10,
    retryDelay: 200
  }
}

async function withAdmin (options, use) {
  const admin = new Admin(settings(options))
  try {
    return await use(admin)
  } finally {
    await admin.close()
  }
}

async function withProducer (options, extra, use) {
  const producer = new Producer({ ...settings(options), serializers: stringSerializers, ...extra })
  try {
    return await use(producer)
  } finally {
    await producer.close()
  }
}

async function partitionsOf (admin, topic) {
  const metadata = await admin.metadata({ topics: [topic], forceUpdate: true })
  return metadata.topics.get(topic).partitions
}

// Reads `--count` records of `--topic` through the group `--group`, from the beginning;
// with `commit`, commits each partition's last record (its offset + 1) at the end.
async function consumeThroughGroup (options, commit) {
  const count = options.int('count')
  const consumer = new Consumer({
    ...settings(options),
    groupId: needed(options, 'group'),
    deserializers: stringDeserializers,
    sessionTimeout: 10000,
    heartbeatInterval: 1000,
    maxWaitTime: 500
  })
  const records = []
  try {
    const stream = await consumer.consume({
      topics: [needed(options, 'topic')],
      mode: 'earliest',
      autocommit: false
    })
    const last = new Map()
    for await (const message of stream) {
      records.push({
        partition: message.partition,
        offset: Number(message.offset),
        key: message.key ?? null,
        value: message.value ?? null,
        headers: Object.fromEntries(message.headers),
        timestamp: Number(message.timestamp)
      })
      last.set(message.partition, message)
      if (records.length >= count) break
    }
    if (commit) {
      for (const message of last.values()) await message.commit()
    }
    await stream.close()
  } finally {
    await consumer.close()
  }
  emit({ records })
}

const commands = {
  // Creates the topic, then waits until every partition has a leader (as kafkajs's
  // waitForLeaders does; this client's createTopics returns before).
  'create-topic': options =>
    withAdmin(options, async admin => {
      const topic = needed(options, 'topic')
      const [created] = await admin.createTopics({
        topics: [topic],
        partitions: options.int('partitions'),
        replicas: options.int('replication-factor')
      })
      for (;;) {
        const partitions = await partitionsOf(admin, topic)
        if (partitions.length > 0 && partitions.every(p => p.leader >= 0)) break
        await sleep(100)
      }
      emit({ created: created.name === topic, partitions: created.partitions, replicas: created.replicas })
    }),

  'list-topics': options => withAdmin(options, async admin => emit({ topics: await admin.listTopics() })),

  'describe-topic': options =>
    withAdmin(options, async admin => {
      const topic = needed(options, 'topic')
      const partitions = (await partitionsOf(admin, topic)).map((p, partition) => ({
        partition,
        leader: p.leader,
        replicas: p.replicas,
        isr: p.isr
      }))
      emit({ name: topic, partitions })
    }),

  'add-partitions': options =>
    withAdmin(options, async admin => {
      await admin.createPartitions({
        topics: [{ name: needed(options, 'topic'), count: options.int('partitions') }]
      })
      emit({ partitions: options.int('partitions') })
    }),

  'delete-topic': options =>
    withAdmin(options, async admin => {
      await admin.deleteTopics({ topics: [needed(options, 'topic')] })
      emit({ deleted: options.topic })
    }),

  produce: options =>
    withProducer(options, {}, producer =>
      produceRecords(async (partition, records) => {
        const topic = needed(options, 'topic')
        const result = await producer.send({
          acks: ProduceAcks.ALL,
          messages: records.map(record => ({
            topic,
            partition,
            key: record.key,
            value: record.value,
            headers: record.headers ?? {},
            ...(record.timestamp !== undefined && { timestamp: BigInt(record.timestamp) })
          }))
        })
        const [answer] = result.offsets
        if (answer.partition !== partition) throw new Error(`answer for partition ${answer.partition}`)
        return answer.offset
      })
    ),

  consume: options => consumeThroughGroup(options, false),
  'group-consume': options => consumeThroughGroup(options, true),

  'offsets-by-time': options =>
    withAdmin(options, async admin => {
      const topic = needed(options, 'topic')
      const count = (await partitionsOf(admin, topic)).length
      await offsetsByTime(async timestamp => {
        const partitions = [...Array(count).keys()].map(partitionIndex => ({
          partitionIndex,
          timestamp: BigInt(timestamp)
        }))
        const [listed] = await admin.listOffsets({ topics: [{ name: topic, partitions }] })
        return listed.partitions.map(p => [p.partitionIndex, Number(p.offset)])
      })
    }),

  'produce-stream': options =>
    withProducer(options, { idempotent: true }, producer =>
      produceStream(options, async (value, partition) => {
        const topic = needed(options, 'topic')
        const result = await producer.send({ acks: ProduceAcks.ALL, messages: [{ topic, partition, value }] })
        return [result.offsets[0].partition, result.offsets[0].offset]
      })
    )
}

await main('@platformatic/kafka', commands)
