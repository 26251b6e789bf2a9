import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startAnthropicMock, startOpenAIChatMock, startGeminiMock } from './integration/lib/vendor_mocks.mjs';
import { startTahua, gatewayConfig } from './integration/lib/tahua.mjs';
const timeouts = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const am = await startAnthropicMock(), om = await startOpenAIChatMock(), gm = await startGeminiMock();
const gw = await startTahua({ config: gatewayConfig({
  providers: [
    { name: 'anth', type: 'anthropic', base_url: am.baseUrl(), api_key: 'sk-ant-test', default_max_tokens: 512, timeouts },
    { name: 'oai', type: 'openai', base_url: om.baseUrl(), api_key: 'sk-test', timeouts },
    { name: 'gem', type: 'gemini', base_url: gm.baseUrl(), api_key: 'gm', timeouts },
  ],
  models: [
    { name: 'claude', provider: 'anth', upstream_model: 'claude-up' },
    { name: 'gpt', provider: 'oai', upstream_model: 'gpt-up' },
    { name: 'gem', provider: 'gem', upstream_model: 'gem-up' },
  ] }) });
const a = new Anthropic({ baseURL: gw.url, apiKey: 'sk-client', maxRetries: 0 });
const o = new OpenAI({ baseURL: gw.url + '/v1', apiKey: 'sk-client', maxRetries: 0 });
const show = async (label, f, mock) => { try { console.log(label, JSON.stringify(await f()).slice(0, 400)); } catch (e) { console.log(label, 'ERR', e.constructor.name, e.status, JSON.stringify(e.error)); } if (mock) console.log('   UP:', JSON.stringify(mock.requests.at(-1)?.body)); };
await show('system array', () => a.messages.create({ model: 'gpt', max_tokens: 50, system: [{ type: 'text', text: 'Rule one.' }, { type: 'text', text: 'Rule two.', cache_control: { type: 'ephemeral' } }], messages: [{ role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] }] }), om);
await show('system array gem', () => a.messages.create({ model: 'gem', max_tokens: 50, system: [{ type: 'text', text: 'Rule one.' }, { type: 'text', text: 'Rule two.' }], messages: [{ role: 'user', content: [{ type: 'text', text: 'one' }, { type: 'text', text: 'two' }] }] }), gm);
await show('resp parts gpt->chat? (openai passthrough)', () => o.responses.create({ model: 'gem', input: [{ role: 'user', content: [{ type: 'input_text', text: 'part A' }, { type: 'input_text', text: 'part B' }] }] }), gm);
await show('resp assistant history', () => o.responses.create({ model: 'claude', input: [{ role: 'user', content: 'first' }, { role: 'assistant', content: [{ type: 'output_text', text: 'answer one' }] }, { role: 'user', content: 'second' }] }), am);
await show('resp two calls', () => o.responses.create({ model: 'claude', tools: [{ type: 'function', name: 'get_weather', parameters: { type: 'object', properties: {} } }], input: [{ role: 'user', content: 'q' }, { type: 'function_call', call_id: 'c1', name: 'get_weather', arguments: '{"location":"A"}' }, { type: 'function_call', call_id: 'c2', name: 'get_weather', arguments: '{"location":"B"}' }, { type: 'function_call_output', call_id: 'c1', output: 'r1' }, { type: 'function_call_output', call_id: 'c2', output: 'r2' }] }), am);
await show('resp stream passthrough unknown event', async () => { const s = await o.responses.create({ model: 'gpt', input: 'x', stream: true }); let n = 0; for await (const e of s) n++; return n; });
await gw.kill(); for (const m of [am, om, gm]) await m.close();
