import Anthropic from '@anthropic-ai/sdk';
import OpenAI from 'openai';
import { startAnthropicMock, startOpenAIChatMock, startGeminiMock, startBedrockMock, BEDROCK_CREDENTIALS } from './integration/lib/vendor_mocks.mjs';
import { startTahua, gatewayConfig } from './integration/lib/tahua.mjs';
const timeouts = { connect: '2s', first_byte: '5s', idle: '5s', total: '30s' };
const am = await startAnthropicMock(), om = await startOpenAIChatMock(), gm = await startGeminiMock(), bm = await startBedrockMock();
const gw = await startTahua({ config: gatewayConfig({
  providers: [
    { name: 'anth', type: 'anthropic', base_url: am.baseUrl(), api_key: 'sk-ant-test', default_max_tokens: 512, timeouts },
    { name: 'oai', type: 'openai', base_url: om.baseUrl(), api_key: 'sk-test', timeouts },
    { name: 'gem', type: 'gemini', base_url: gm.baseUrl(), api_key: 'gm', timeouts },
    { name: 'bed', type: 'bedrock', base_url: bm.baseUrl(), aws: { region: BEDROCK_CREDENTIALS.region, access_key_id: BEDROCK_CREDENTIALS.accessKeyId, secret_access_key: BEDROCK_CREDENTIALS.secretAccessKey }, timeouts },
    { name: 'local', type: 'mock', timeouts },
  ],
  models: [
    { name: 'claude-pass', provider: 'anth', upstream_model: 'claude-up' },
    { name: 'gpt-via', provider: 'oai', upstream_model: 'gpt-up' },
    { name: 'gem-via', provider: 'gem', upstream_model: 'gem-up' },
    { name: 'bed-via', provider: 'bed', upstream_model: 'bed-up' },
    { name: 'local-mock', provider: 'local' },
  ] }) });
const c = new Anthropic({ baseURL: gw.url, apiKey: 'sk-client', maxRetries: 0 });
const tools = [{ name: 'get_weather', description: 'w', input_schema: { type: 'object', properties: { location: { type: 'string' } } } }];
const show = async (label, f) => { try { console.log(label, JSON.stringify(await f())); } catch (e) { console.log(label, 'ERR', e.constructor.name, e.status, JSON.stringify(e.error)); } };
for (const model of ['claude-pass', 'gpt-via', 'gem-via', 'bed-via', 'local-mock']) {
  await show(model + ' text', () => c.messages.create({ model, max_tokens: 100, messages: [{ role: 'user', content: 'Hi there' }] }));
  await show(model + ' tool', () => c.messages.create({ model, max_tokens: 100, tools, messages: [{ role: 'user', content: 'Weather?' }] }));
  await show(model + ' stream tool', () => c.messages.stream({ model, max_tokens: 100, tools, messages: [{ role: 'user', content: 'Weather?' }] }).finalMessage());
  await show(model + ' count', () => c.messages.countTokens({ model, messages: [{ role: 'user', content: 'Hi there' }] }));
}
await show('unknown', () => c.messages.create({ model: 'nope', max_tokens: 100, messages: [{ role: 'user', content: 'Hi' }] }));
console.log('--- anth reqs'); for (const r of am.requests) console.log(r.path, JSON.stringify(r.headers), JSON.stringify(r.body));
console.log('--- oai reqs'); for (const r of om.requests) console.log(r.path, JSON.stringify(r.body));
console.log('--- log'); for (const l of gw.accessLog()) console.log(JSON.stringify(l));
await gw.kill(); for (const m of [am, om, gm, bm]) await m.close();
